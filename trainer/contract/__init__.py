"""What the control service may know about the trainer: spec, events, exit codes, run layout.

Three parts, each importing only those before it (tests/test_import_contract.py holds the order):
- accelerators/: the TPU slices and generations every spec is checked against;
- spec/: the job spec, its parts, the values a spec string may hold and how a spec enters its hash;
- run/: what a run writes and reports (events, exit codes, layout, evaluations, samples, the shims' config).

This package imports only pydantic, PyYAML (spec/file.py, the spec-file reader both command lines use)
and the standard library, so the service image stays slim.
"""

from trainer.contract.run.events import (
    EVAL_STAGE_ORDER,
    EVENTS_FILE,
    STAGE_ORDER,
    ArtifactWritten,
    CheckpointSaved,
    EvalReported,
    EvalResult,
    GoodputMeasured,
    HangDetected,
    RunFinished,
    RunStarted,
    Stage,
    StageFinished,
    StageStarted,
    StorageMeasured,
    TrainerEvent,
    TrainStep,
    dump_event,
    parse_event,
)
from trainer.contract.run.exit_codes import NON_RETRYABLE_EXIT_CODES, ExitCode, describe_exit_code
from trainer.contract.run.layout import RunLayout, join_uri
from trainer.contract.run.repro import REPRO_SCHEMA_VERSION, ReproRecord
from trainer.contract.run.samples import SIGNAL_METRIC, Sample, StepSamples, step_from_file_name
from trainer.contract.run.storage import STORAGE_PARTS, RunStorage
from trainer.contract.spec.grpo import GrpoSpec, RewardSpec
from trainer.contract.spec.hardware import HardwareSpec
from trainer.contract.spec.job import (
    JOB_ID_RE,
    DatasetSpec,
    ExportSpec,
    JobSpec,
    ModelDims,
    ModelSpec,
    default_job_id,
)
from trainer.contract.spec.locations import local_path, location_kind

__all__ = [
    "EVAL_STAGE_ORDER",
    "EVENTS_FILE",
    "CheckpointSaved",
    "EvalReported",
    "JOB_ID_RE",
    "NON_RETRYABLE_EXIT_CODES",
    "REPRO_SCHEMA_VERSION",
    "STAGE_ORDER",
    "STORAGE_PARTS",
    "ArtifactWritten",
    "DatasetSpec",
    "EvalResult",
    "GoodputMeasured",
    "HangDetected",
    "ExitCode",
    "ExportSpec",
    "GrpoSpec",
    "HardwareSpec",
    "JobSpec",
    "ModelDims",
    "ModelSpec",
    "ReproRecord",
    "RewardSpec",
    "RunFinished",
    "RunLayout",
    "RunStarted",
    "RunStorage",
    "SIGNAL_METRIC",
    "Sample",
    "Stage",
    "StageFinished",
    "StageStarted",
    "StepSamples",
    "StorageMeasured",
    "TrainStep",
    "TrainerEvent",
    "default_job_id",
    "describe_exit_code",
    "dump_event",
    "join_uri",
    "local_path",
    "location_kind",
    "parse_event",
    "step_from_file_name",
]
