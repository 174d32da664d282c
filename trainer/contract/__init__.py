"""What the control service may know about the trainer: spec, events, exit codes, run layout.

This package imports only pydantic, PyYAML (spec_file.py, the spec-file reader both command lines use)
and the standard library, so the service image stays slim.
"""

from .events import (
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
from .exit_codes import NON_RETRYABLE_EXIT_CODES, ExitCode, describe_exit_code
from .grpo_spec import GrpoSpec, RewardSpec
from .hardware_spec import HardwareSpec
from .layout import RunLayout, join_uri
from .locations import local_path, location_kind
from .repro import REPRO_SCHEMA_VERSION, ReproRecord
from .run_storage import STORAGE_PARTS, RunStorage
from .samples import SIGNAL_METRIC, Sample, StepSamples, step_from_file_name
from .spec import (
    JOB_ID_RE,
    DatasetSpec,
    ExportSpec,
    JobSpec,
    ModelDims,
    ModelSpec,
    default_job_id,
)

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
