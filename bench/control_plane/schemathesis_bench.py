"""Schemathesis against the real service: does every response match what /openapi.json declares?

The service runs as the image runs it (`uvicorn service.app:create_app_from_env --factory`) with
SQLite and the local launcher in a temporary directory, and a bootstrap bearer token made here.
Jobs that generated submissions create are launched for real, but the trainer command is `true`:
the local launcher's runner starts, `true` exits 0 at once, no trainer runs. gs:// goes to
fake-gcs-server on loopback (STORAGE_EMULATOR_HOST), with the buckets of the schema's examples
created, so nothing leaves the machine. A few jobs are submitted first and offered to the generator
as `job_id`s, and real input files as the spec's locations, so the per-job operations and valid
submissions reach their logic instead of 404 and 422.

Schemathesis runs in rounds (a new seed each) with every check until the service has answered
`--requests` requests (counted from the service's own access log). Reported:
- requests, per operation and per status; 5xx responses;
- conformance findings: any failed check (status or content type not declared, body or headers not
  matching the schema, invalid data accepted, auth ignored, ...) other than the next one;
- schema-valid requests refused (positive_data_acceptance): the service applies a rule the schema
  does not state; listed by field and reason, reported but not failing the run (the job spec's
  own validators are the spec's business: trainer/contract/spec/job.py);
- ERROR lines in the service's log (an SSE stream can die after its 200 has been sent).
It prints a summary, writes bench/results/schemathesis.json, and exits 1 on any 5xx, conformance
finding or logged error.

    python bench/control_plane/schemathesis_bench.py [--requests 10000] [--seed 1] [--workers 2]
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

if TYPE_CHECKING:  # imported in main(), once the repository is on sys.path
    from harness.gcs_emulator import GcsEmulator

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "bench" / "results" / "schemathesis.json"
BIN = Path(sys.executable).parent
ACCEPTANCE = "positive_data_acceptance"
SEED_JOBS = 6
QUOTED, QUOTED_VALUE = r"'[^']*'", "'…'"

# A cursor is opaque: a well-formed one the service did not issue is a 400, as declared.
CONFIG = """
[dictionaries.job_ids]
values = {job_ids}

[parameters."path.job_id"]
dictionary = "job_ids"
probability = 0.6
{locations}
# Refusing a body over the size limit (413) is a rejection too.
[checks.negative_data_rejection]
expected-statuses = ["400", "401", "403", "404", "405", "406", "409", "413", "415", "422", "428", "429", "5xx"]

[[operations]]
include-name = "GET /v1/jobs"
checks.{acceptance}.expected-statuses = ["2xx", "3xx", "400", "401", "403", "404", "409", "429", "5xx"]
"""


def start_service(work: Path, token: str, port: int, gcs: GcsEmulator) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLJOB_")}
    env.update(gcs.env())
    env.update(
        RLJOB_ENVIRONMENT="dev",
        RLJOB_LAUNCHER="local",
        RLJOB_STATE_DIR=str(work / "state"),
        RLJOB_BOOTSTRAP_TOKEN=token,
        RLJOB_BOOTSTRAP_TEAM="bench",
        RLJOB_TRAINER_COMMAND='["true"]',
        RLJOB_MAX_CONCURRENT_JOBS="8",
        RLJOB_SSE_MAX_DURATION_S="1",
        RLJOB_GCS_RETRY_TIMEOUT_S="1",
        PYTHONPATH=str(REPO),
    )
    argv = [
        str(BIN / "uvicorn"),
        "service.app:create_app_from_env",
        "--factory",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        "1",
        "--timeout-graceful-shutdown",
        "5",
    ]
    with (work / "service.log").open("wb") as log:
        return subprocess.Popen(argv, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT)


def wait_ready(client: httpx.Client, server: subprocess.Popen[bytes], work: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"the service exited: {(work / 'service.log').read_text()[-3000:]}")
        try:
            if client.get("/readyz").status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise SystemExit("the service did not become ready within 60 s")


def location_dictionaries(work: Path) -> str:
    """Real inputs in the work dir, offered for the spec's locations half of the time: the schema's
    location pattern admits relative strings the spec refuses, and without these hardly any generated
    submission would be valid (so the 201 path, launches and live jobs would go untested)."""
    (work / "model").mkdir()
    (work / "data").mkdir()
    files = {"template": "data/template.json", "rewards": "data/rewards.py", "train": "data/train.jsonl", "eval": "data/eval.jsonl"}
    for relative in files.values():
        (work / relative).write_text("")
    bindings = {
        "body.model.source": [str(work / "model")],
        "body.model.tokenizer": [str(work / "model")],
        "body.output": [str(work / "runs")],
        "body.dataset.prompt_template": [str(work / files["template"])],
        "body.grpo.rewards.functions_path": [str(work / files["rewards"])],
        "body.dataset.train_files[*]": [str(work / files["train"])],
        "body.dataset.eval_files[*]": [str(work / files["eval"])],
        # The local launcher runs CPU jobs only (TPU types are refused here, as declared by 422).
        "body.hardware.accelerator": ["cpu"],
        "body.hardware.rollout_data_parallelism": [-1, 1],
        "body.hardware.rollout_tensor_parallelism": [-1, 1],
    }
    lines = []
    for i, (key, values) in enumerate(bindings.items()):
        lines += [
            f"\n[dictionaries.location_{i}]",
            f"values = {json.dumps(values)}",
            f'[parameters."{key}"]',
            f'dictionary = "location_{i}"',
            "probability = 0.5",
        ]
    return "\n".join(lines) + "\n"


def create_example_buckets(gcs_url: str, openapi: dict[str, Any]) -> None:
    """The buckets the schema's example submissions write to, so their jobs' run files can be read."""
    buckets = set(re.findall(r'"gs://([a-z0-9][a-z0-9._-]+[a-z0-9])', json.dumps(openapi)))
    for bucket in sorted(buckets):
        httpx.post(f"{gcs_url}/storage/v1/b", params={"project": "bench"}, json={"name": bucket}).raise_for_status()


def seed_jobs(client: httpx.Client, work: Path) -> list[str]:
    ids = []
    for i in range(SEED_JOBS):
        body = {
            "name": f"bench-seed-{i}",
            "model": {"name": "llama3.1-8b", "source": str(work / "model")},
            "hardware": {"accelerator": "cpu", "rollout_engine": "jax"},
            "output": str(work / "runs"),
        }
        response = client.post("/v1/jobs", json=body)
        if response.status_code != 201:
            raise SystemExit(f"seeding a job failed: {response.status_code} {response.text}")
        ids.append(response.json()["id"])
    return ids


def run_round(url: str, token: str, config: Path, report: Path, seed: int, examples: int, workers: int, phases: str) -> None:
    argv = [
        str(BIN / "schemathesis"),
        "--config-file",
        str(config),
        "run",
        f"{url}/openapi.json",
        "--phases",
        phases,
        "-H",
        f"Authorization: Bearer {token}",
        "--checks",
        "all",
        "--max-examples",
        str(examples),
        "--seed",
        str(seed),
        "--workers",
        str(workers),
        "--request-timeout",
        "15",
        "--no-shrink",
        "--continue-on-failure",
        "--report",
        "ndjson",
        "--report-ndjson-path",
        str(report),
        "--output-truncate",
        "true",
        "--no-color",
    ]
    # Exit code 1 just means findings; they are read from the report.
    subprocess.run(argv, cwd=config.parent, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)


def _decoded(content: Any) -> str:
    if isinstance(content, dict) and "$base64" in content:
        return base64.b64decode(content["$base64"]).decode("utf-8", "replace")
    return content if isinstance(content, str) else ""


def _refusal_reasons(response: dict[str, Any]) -> list[str]:
    try:
        problems = json.loads(_decoded(response.get("content")))["detail"]
    except (ValueError, KeyError, TypeError):
        return [f"HTTP {response.get('status_code')}"]
    if isinstance(problems, str):
        return [f"HTTP {response.get('status_code')}: {problems}"]
    # The refused value itself is left out ('…'): the same rule then counts as one reason.
    return [f"{'.'.join(map(str, p.get('loc', [])))}: {re.sub(QUOTED, QUOTED_VALUE, p.get('msg', ''))[:160]}" for p in problems]


class Findings:
    def __init__(self) -> None:
        self.interactions = 0
        self.failures: dict[tuple[str, str, str, int | None], dict[str, Any]] = {}
        self.refused: Counter[str] = Counter()
        self.refused_by_operation: Counter[str] = Counter()
        self.phases: Counter[str] = Counter()

    def read(self, report: Path) -> None:
        for line in report.read_text().splitlines():
            event = json.loads(line)
            if "ScenarioFinished" not in event:
                continue
            scenario = event["ScenarioFinished"]
            recorder = scenario.get("recorder") or {}
            interactions = recorder.get("interactions") or {}
            self.interactions += len(interactions)
            self.phases[scenario.get("phase", "?")] += len(interactions)
            for case_id, checks in (recorder.get("checks") or {}).items():
                interaction = interactions.get(case_id) or {}
                for check in checks:
                    if check.get("status") == "failure":
                        self._add(check, recorder.get("label", "?"), interaction)

    def _add(self, check: dict[str, Any], label: str, interaction: dict[str, Any]) -> None:
        request, response = interaction.get("request") or {}, interaction.get("response") or {}
        failure = (check.get("failure_info") or {}).get("failure") or {}
        operation = failure.get("operation") or label
        if check["name"] == ACCEPTANCE:
            self.refused_by_operation[operation] += 1
            for reason in _refusal_reasons(response):
                self.refused[f"{operation} {reason}"] += 1
            return
        status = response.get("status_code")
        key = (check["name"], operation, failure.get("title", ""), status)
        entry = self.failures.setdefault(
            key,
            {
                "check": check["name"],
                "code": failure.get("code"),
                "operation": operation,
                "title": failure.get("title"),
                "status": status,
                "message": (failure.get("message") or "")[:400],
                "count": 0,
                "example": {
                    "request": f"{request.get('method')} {request.get('uri')}",
                    "body": _decoded(request.get("body"))[:300],
                    "response": _decoded(response.get("content"))[:300],
                },
            },
        )
        entry["count"] += 1


def service_log(path: Path, skip_requests: int) -> tuple[Counter[tuple[str, int]], list[str]]:
    """(requests as (method and path, status) counts, ERROR lines) from the service's JSON log lines."""
    requests: Counter[tuple[str, int]] = Counter()
    errors: list[str] = []
    seen = 0
    for line in path.read_text(errors="replace").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            errors.append(f"not a JSON log line: {line[:300]}")
            continue
        if record.get("logger") == "uvicorn.access":
            seen += 1
            if seen > skip_requests:
                requests[(f"{record['method']} {str(record['path']).split('?')[0]}", int(record["status"]))] += 1
        elif record.get("level") in ("ERROR", "CRITICAL"):
            errors.append(f"{record.get('logger')}: {record.get('message')} {record.get('exception', '')[-600:]}")
    return requests, errors


def operation_of(request: str, declared: dict[str, re.Pattern[str]]) -> str:
    """`GET /v1/jobs/rl-x/logs` -> `GET /v1/jobs/{job_id}/logs`; probes of undeclared methods as one."""
    method, _, path = request.partition(" ")
    for operation, pattern in declared.items():
        if operation.startswith(f"{method} ") and pattern.fullmatch(path):
            return operation
    return "other: undeclared method or path (unsupported_method probes)"


def declared_operations(openapi: dict[str, Any]) -> dict[str, re.Pattern[str]]:
    return {
        f"{method.upper()} {template}": re.compile("[^/]+".join(map(re.escape, re.split(r"\{[^/}]+\}", template))))
        for template, operations in openapi["paths"].items()
        for method in operations
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=10_000, help="stop once the service has answered this many")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--examples", type=int, default=0, help="per operation per round (default: from --requests)")
    parser.add_argument("--max-rounds", type=int, default=50)
    parser.add_argument("--phases", default="examples,coverage,fuzzing,stateful", help="schemathesis phases to run")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    from bench.result_meta import machine_facts
    from harness.gcs_emulator import GcsEmulator
    from service.domain.tokens import generate_token
    from service.free_port import free_port
    from service.process_stop import terminate_then_kill

    machine = machine_facts()
    started = time.monotonic()
    examples = args.examples or max(5, min(400, args.requests // 25))
    with tempfile.TemporaryDirectory(prefix="rljob-schemathesis-") as tmp:
        work = Path(tmp)
        token, port = generate_token(), free_port()
        url = f"http://127.0.0.1:{port}"
        gcs = GcsEmulator(work / "gcs")
        gcs.start()
        server = start_service(work, token, port, gcs)
        try:
            with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30) as client:
                wait_ready(client, server, work)
                locations = location_dictionaries(work)
                job_ids = seed_jobs(client, work)
                openapi = client.get("/openapi.json").json()
            create_example_buckets(gcs.url, openapi)
            config = work / "schemathesis.toml"
            config.write_text(CONFIG.format(job_ids=json.dumps(job_ids), acceptance=ACCEPTANCE, locations=locations))
            setup_requests = sum(1 for line in (work / "service.log").read_text().splitlines() if '"uvicorn.access"' in line)
            findings, rounds = Findings(), 0
            while rounds < args.max_rounds:
                report = work / f"round-{rounds}.ndjson"
                run_round(url, token, config, report, args.seed + rounds, examples, args.workers, args.phases)
                rounds += 1
                if report.exists():
                    findings.read(report)
                served = service_log(work / "service.log", setup_requests)[0].total()
                print(
                    f"round {rounds}: {served} requests so far, {findings.interactions} recorded by schemathesis",
                    flush=True,
                )
                if served >= args.requests:
                    break
        finally:
            terminate_then_kill(server, grace_s=30)
            gcs.stop()
        requests, log_errors = service_log(work / "service.log", setup_requests)

    declared = declared_operations(openapi)
    operations: Counter[str] = Counter()
    statuses: Counter[int] = Counter()
    jobs_created = 0
    for (request, status), count in requests.items():
        operation = operation_of(request, declared)
        operations[operation] += count
        statuses[status] += count
        jobs_created += count if (operation, status) == ("POST /v1/jobs", 201) else 0
    server_errors = sum(count for status, count in statuses.items() if status >= 500)
    result = {
        "requests": statuses.total(),
        "requests_recorded_by_schemathesis": findings.interactions,
        "requests_by_phase": dict(findings.phases),
        "requests_by_operation": dict(operations.most_common()),
        "operations_declared": len(declared),
        "operations_exercised": len(set(declared) & set(operations)),
        "status_counts": {str(k): v for k, v in sorted(statuses.items())},
        "generated_jobs_created": jobs_created,
        "server_errors_5xx": server_errors,
        "conformance_findings": sorted(findings.failures.values(), key=lambda f: -f["count"]),
        "schema_valid_refused": {
            "count": findings.refused_by_operation.total(),
            "by_operation": dict(findings.refused_by_operation),
            "reasons": dict(findings.refused.most_common(40)),
        },
        "service_log_errors": log_errors[:50],
        "rounds": rounds,
        "examples_per_operation_per_round": examples,
        "seed": args.seed,
        "workers": args.workers,
        "phases": args.phases,
        "duration_s": round(time.monotonic() - started, 1),
        "setup": "uvicorn create_app_from_env, SQLite, local launcher with trainer command `true`, "
        f"{SEED_JOBS} seeded jobs offered as job_id (p=0.6), real input files offered for the spec's "
        "locations (p=0.5), gs:// on fake-gcs-server with the examples' buckets",
    }
    ok = server_errors == 0 and not findings.failures and not log_errors
    result["passed"] = ok
    result["machine"] = machine | {"load_average_at_end": [round(x, 2) for x in os.getloadavg()]}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"requests: {result['requests']} over {result['operations_exercised']}/{len(declared)} operations in {rounds} rounds "
        f"({result['duration_s']} s); statuses {result['status_counts']}"
    )
    print(f"5xx: {server_errors}; conformance findings: {len(findings.failures)}; service log errors: {len(log_errors)}")
    for finding in result["conformance_findings"][:10]:
        print(f"  {finding['check']} {finding['operation']} [{finding['status']}] x{finding['count']}: {finding['title']}")
    for line in log_errors[:5]:
        print(f"  log: {line[:300]}")
    refused = result["schema_valid_refused"]
    print(f"jobs created by generated submissions: {jobs_created} (launched by the local launcher: `true`)")
    print(f"schema-valid requests refused: {refused['count']} {refused['by_operation']}")
    for reason, count in list(refused["reasons"].items())[:8]:
        print(f"  x{count} {reason}")
    print(f"{'PASS' if ok else 'FAIL'}; results in {args.out}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
