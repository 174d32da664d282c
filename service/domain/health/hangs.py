"""The words for a hung attempt: what the job's message says when the service restarts it, and when it gives up.

The trainer decides that it is hung (trainer/hang_watchdog.py: no progress event for longer than its hang limit,
trainer/contract/spec/hang.py), writes every thread's stacks to its stage log, sends a `hung` event and exits
ExitCode.HUNG. The observation policy turns that exit into a restart from the last checkpoint
(Decision.HUNG_RESTART) while RLJOB_MAX_HUNG_RESTARTS allow, then into FAILED with reason HUNG. Unlike the
`stalled` verdict (learning_health.py), which only labels a job whose train steps stopped, this acts.
"""

from __future__ import annotations

from service.domain.records.models import JobRecord
from service.domain.records.ports import Observation
from service.domain.records.run_report import HangReport


def _where(hang: HangReport | None, obs: Observation) -> str:
    if hang is None:  # its event was not read: the exit code is all there is
        return f"the trainer found itself hung ({obs.message or 'exit 79'}); its stacks are in the stage log"
    where = f"in the {hang.stage} stage" if hang.stage else "before its first stage"
    after = f" after train step {hang.step}" if hang.step is not None else ""
    return (
        f"attempt {hang.attempt} hung {where}{after}: no progress for {hang.idle_s:.0f} s (limit {hang.limit_s:.0f} s); "
        f"the stacks of every thread are in {hang.stacks}"
    )


def latest_hang(rec: JobRecord) -> HangReport | None:
    return rec.report.hangs[-1] if rec.report.hangs else None


def hung_restart_message(rec: JobRecord, max_hung_restarts: int, obs: Observation) -> str:
    """After rec.report.hung_restarts was counted for this restart."""
    return (
        f"{_where(latest_hang(rec), obs)}; restarting from its last checkpoint (hung restart {rec.report.hung_restarts} "
        f"of {max_hung_restarts})"
    )


def hung_failure_message(rec: JobRecord, obs: Observation) -> str:
    return (
        f"{_where(latest_hang(rec), obs)}; restarted {rec.report.hung_restarts} time(s) after hangs already "
        f"(RLJOB_MAX_HUNG_RESTARTS), giving up. Read the stacks for where it waits, fix the cause, or raise "
        f"spec.hang_timeout_s if its steps are this slow; logs: `rljob logs {rec.id}`"
    )
