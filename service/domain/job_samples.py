"""Which of a job's completion samples to show, read through the RunFiles port.

The trainer writes one samples file per train step (trainer/contract/run/samples.py): a few of the
step's completions with what each reward function paid. Without a step the newest is shown; the
answer lists the steps that have samples so a client can offer the others.
"""

from __future__ import annotations

from service.domain.records.errors import SamplesNotFound
from service.domain.records.models import JobRecord, SamplesPublic
from service.domain.records.ports import RunFiles

MAX_STEPS_LISTED = 5000  # the newest ones; a longer run's older steps are still readable by number


def step_ranges(steps: list[int]) -> str:
    """[1, 2, 3, 7, 9, 10] -> "1-3, 7, 9-10" (ascending input)."""
    runs: list[list[int]] = []
    for step in steps:
        if runs and step == runs[-1][1] + 1:
            runs[-1][1] = step
        else:
            runs.append([step, step])
    return ", ".join(str(first) if first == last else f"{first}-{last}" for first, last in runs)


def read_job_samples(run_files: RunFiles | None, record: JobRecord, step: int | None) -> SamplesPublic:
    """The samples of `step` (the newest step with samples if None); SamplesNotFound says why not."""
    if run_files is None:
        raise SamplesNotFound(f"this service reads no run directories, so job {record.id}'s samples cannot be shown")
    steps = run_files.sample_steps(record)
    if step is None:
        if not steps:
            raise SamplesNotFound(
                f"job {record.id} has no samples yet: the trainer writes a few completions with their rewards at every train step"
            )
        step = steps[-1]
    samples = run_files.read_samples(record, step)
    if samples is None:
        if step in steps:
            raise SamplesNotFound(
                f"the samples of job {record.id} at step {step} cannot be read (not valid, or too large); the service log says why"
            )
        have = f"steps with samples: {step_ranges(steps[-MAX_STEPS_LISTED:])}" if steps else "it has none yet"
        raise SamplesNotFound(f"job {record.id} has no samples for step {step}; {have}")
    return SamplesPublic(job_id=record.id, step=step, steps_available=steps[-MAX_STEPS_LISTED:], samples=samples)
