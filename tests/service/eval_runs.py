"""A stand-in for an eval job's trainer in the service tests: writes what trainer/evals would (the outcomes file, then
the report) into the job's run directory and sends the report as its `eval_report` event (FakeProgress), then ends
the workload (FakeLauncher). Row outcomes are given as 0/1 lists, so a test knows exactly what differs."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from pathlib import Path

from service.domain.records.phases import JobPhase
from service.domain.records.ports import ObservedState
from tests.service.conftest import Api
from tests.service.service_helpers import TOKEN_A, wait_for_phase
from trainer.contract import EvalReported, RunLayout
from trainer.contract.run.eval_report import EvalReport, FunctionOutcome, RowOutcome, summarize
from trainer.contract.run.evaluation import row_id
from trainer.contract.spec.eval_suite import EvalCheckpoint, EvalSampling, SuiteIdentity

FUNCTION = "exact"


def outcome_rows(greedy: list[int], samples: list[list[int]] | None = None, *, questions: list[str] | None = None) -> list[RowOutcome]:
    """One row per entry: the greedy completion right (1) or wrong (0), and the k sampled ones."""
    samples = samples or [[g, g] for g in greedy]
    questions = questions or [f"what is {i} + {i}?" for i in range(len(greedy))]
    rows = []
    for index, (g, drawn, question) in enumerate(zip(greedy, samples, questions, strict=True)):
        function = FunctionOutcome(greedy=float(g), samples=[float(s) for s in drawn], majority=int(sum(drawn) * 2 > len(drawn)))
        rows.append(
            RowOutcome(
                id=row_id(question),
                index=index,
                question=question,
                answers=[str(2 * index)],
                greedy="the answer is " + str(2 * index if g else -1),
                samples=["..." for _ in drawn],
                functions={FUNCTION: function},
            )
        )
    return rows


def suite_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def finish_eval(
    api: Api, job_id: str, rows: list[RowOutcome], *, content_hash: str, builtin: bool, output: Path, token: str = TOKEN_A
) -> dict:
    """Write the run's outcomes and report as the trainer does, report them, and let the workload succeed; the job's
    final JobPublic (read with `token`, a token of the job's team)."""
    job = api.client.get(f"/v1/jobs/{job_id}", headers=api.as_(token)).json()
    task = job["spec"]["evaluation"]
    layout = RunLayout(str(output), job_id)
    Path(layout.eval_dir).mkdir(parents=True, exist_ok=True)
    Path(layout.eval_outcomes).write_text("".join(row.model_dump_json() + "\n" for row in rows))
    report = EvalReport(
        suite=SuiteIdentity(
            name=task["suite"]["name"],
            builtin=builtin,
            content_hash=content_hash,
            rows=len(rows),
            reward_functions=[FUNCTION],
            sampling=EvalSampling(),
        ),
        checkpoint=EvalCheckpoint.model_validate(task["checkpoint"]),
        model_source=job["spec"]["model"]["source"],
        n=len(rows),
        k=len(rows[0].samples) if rows else 1,
        functions={FUNCTION: summarize(rows, FUNCTION)},
        primary=FUNCTION,
        generate_s=1.5,
        outcomes_file=layout.eval_outcomes,
    )
    Path(layout.eval_report).write_text(report.model_dump_json())
    api.progress.add(EvalReported(seq=0, time=datetime.now(UTC), job_id=job_id, report=report))
    api.launcher.emit(job_id, ObservedState.RUNNING)
    wait_for_phase(lambda: api.phase(job_id, token), JobPhase.RUNNING)
    api.launcher.emit(job_id, ObservedState.SUCCEEDED)
    wait_for_phase(lambda: api.phase(job_id, token), JobPhase.SUCCEEDED)
    return api.client.get(f"/v1/jobs/{job_id}", headers=api.as_(token)).json()


def submit_eval(api: Api, body: dict[str, object], token: str = TOKEN_A, **headers: str) -> dict:
    response = api.client.post("/v1/evals", json=body, headers={**api.as_(token), **headers})
    assert response.status_code in (200, 201), response.text
    return response.json()
