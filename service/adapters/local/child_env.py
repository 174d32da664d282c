"""The environment a local job's runner and trainer get: the service's, less its own settings."""

from __future__ import annotations

from collections.abc import Mapping

# The RLJOB_* variables the trainer reads (grep trainer/ for RLJOB_). Every other RLJOB_* is the
# service's own configuration (RLJOB_DATABASE_URL, RLJOB_BOOTSTRAP_TOKEN, ...) and stays out of the
# child's environment.
TRAINER_ENV_VARS = frozenset(
    {
        "RLJOB_WORK_DIR",
        "RLJOB_CONVERSION_CACHE",
        "RLJOB_TINY_DIR",
        "RLJOB_GCS_RETRY_TIMEOUT_S",
        "RLJOB_HANG_FLOOR_S",
        "RLJOB_HANG_STEP_FACTOR",
    }
)


def trainer_env(base: Mapping[str, str], job_id: str) -> dict[str, str]:
    env = {k: v for k, v in base.items() if not k.startswith("RLJOB_") or k in TRAINER_ENV_VARS}
    env["RLJOB_JOB_ID"] = job_id
    return env
