"""Where a job's files live, as URIs. Both the trainer and the service derive paths from here.

<output>/<job-id>/
    spec.json                 the spec the job ran with
    repro.json                what produced the run: versions, seeds, input hashes (repro.py)
    events.jsonl              progress events (see events.py)
    logs/<stage>.log          each stage's MaxText output
    stages/<stage>.done       completion markers, written last
    data/                     the dataset materialised as parquet
    maxtext/                  to_maxtext output: 0/items (unless served from the conversion cache)
    rl/<job-id>/              train_rl run: checkpoints/actor/<N>/..., checkpoints/best/<N>/model_params, tensorboard/
    best-checkpoint.json      with export.checkpoint=best, the best evaluation so far and its weights (best_checkpoint.py)
    samples/train-<N>.json    completions and their rewards per step (samples.py)
    eval/<label>.jsonl        each evaluation's per-row outcomes: before, step-<N>, after (evaluation.py)
    eval/outcomes.jsonl       an eval job's per-row outcomes, then eval/report.json (eval_report.py)
    hf/                       to_huggingface export
    manifest.json             artifacts with sizes and checksums
"""

from __future__ import annotations

from dataclasses import dataclass

from trainer.contract.run.best_checkpoint import BEST_RECORD_FILE
from trainer.contract.run.eval_report import OUTCOMES_FILE, REPORT_FILE
from trainer.contract.run.evaluation import EVAL_DIR, eval_file_name
from trainer.contract.run.events import EVENTS_FILE, Stage
from trainer.contract.run.repro import REPRO_FILE
from trainer.contract.run.samples import samples_file_name


def join_uri(base: str, *parts: str) -> str:
    out = base.rstrip("/")
    for part in parts:
        out = f"{out}/{part.strip('/')}"
    return out


@dataclass(frozen=True)
class RunLayout:
    output: str
    job_id: str

    @property
    def root(self) -> str:
        return join_uri(self.output, self.job_id)

    def path(self, *parts: str) -> str:
        return join_uri(self.root, *parts)

    @property
    def spec(self) -> str:
        return self.path("spec.json")

    @property
    def repro(self) -> str:
        return self.path(REPRO_FILE)

    @property
    def events(self) -> str:
        return self.path(EVENTS_FILE)

    @property
    def manifest(self) -> str:
        return self.path("manifest.json")

    def stage_log(self, stage: Stage) -> str:
        return self.path("logs", f"{stage.value}.log")

    def stage_marker(self, stage: Stage) -> str:
        return self.path("stages", f"{stage.value}.done")

    @property
    def data_dir(self) -> str:
        return self.path("data")

    @property
    def converted_dir(self) -> str:
        return self.path("maxtext")

    @property
    def rl_base(self) -> str:
        """train_rl's base_output_directory; its run_name is the job id."""
        return self.path("rl")

    @property
    def rl_run(self) -> str:
        return join_uri(self.rl_base, self.job_id)

    @property
    def actor_checkpoints(self) -> str:
        return join_uri(self.rl_run, "checkpoints", "actor")

    @property
    def best_checkpoints(self) -> str:
        """Parameters of the best-evaluated weights, kept beside the actor's own retention (best_checkpoint.py)."""
        return join_uri(self.rl_run, "checkpoints", "best")

    @property
    def best_checkpoint_record(self) -> str:
        return self.path(BEST_RECORD_FILE)

    @property
    def tensorboard_dir(self) -> str:
        """Where Tunix writes the run's TensorBoard event files: the trainer tails them, `rljob tensorboard` prints it."""
        return join_uri(self.rl_run, "tensorboard")

    @property
    def samples_dir(self) -> str:
        return self.path("samples")

    def samples_file(self, step: int) -> str:
        return join_uri(self.samples_dir, samples_file_name(step))

    @property
    def eval_dir(self) -> str:
        return self.path(EVAL_DIR)

    def eval_file(self, label: str) -> str:
        return join_uri(self.eval_dir, eval_file_name(label))

    @property
    def eval_outcomes(self) -> str:
        """An eval job's per-row outcomes (eval_report.RowOutcome lines)."""
        return join_uri(self.eval_dir, OUTCOMES_FILE)

    @property
    def eval_report(self) -> str:
        return join_uri(self.eval_dir, REPORT_FILE)

    @property
    def export_dir(self) -> str:
        return self.path("hf")
