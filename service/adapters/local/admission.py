"""Which of the local launcher's waiting jobs start now: per-team quotas, priorities, the machine's
TPU chips and its job slots. Pure: the launcher passes in what waits, what runs and the host's chips,
and carries the answer out.

Order: priority (high, normal, low), then submission order. Each waiting job in that order starts if
its team is under its job limit, its team's running chips plus its own fit the team's chip limit,
the running jobs' chips plus its own fit the machine's (a cpu job holds none), and the machine has a
free slot (RLJOB_MAX_CONCURRENT_JOBS). The machine's chips are a hard limit, not a share: libtpu lets
one process at a time open a chip, and a second TPU trainer fails after launch ("Internal error when
accessing libtpu multi-process lockfile") instead of waiting. A job that cannot start does not hold
back a later job that can (a cpu job of the same team, or another team's): on one shared machine an
idle slot helps nobody. The reason a job waits is its team's limit before the machine's, because
only the team's limit is the one a free slot would not lift; and the chips before the slots, since
a free slot would not lift that either.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from service.domain.records.models import QueueStatus
from trainer.contract.accelerators.tpu import tpu_slice

PRIORITY_ORDER: Mapping[str, int] = {"high": 0, "normal": 1, "low": 2}  # JobSpec.priority values
NO_TEAM = "(none)"  # a spec without a team (the service always sets one; direct launcher use may not)

TEAM_JOB_LIMIT = "TeamJobLimit"
TEAM_CHIP_LIMIT = "TeamChipLimit"
HOST_CHIPS = "HostChips"
HOST_SLOTS = "HostSlots"


@dataclass(frozen=True)
class TeamLimits:
    """What one team's running jobs may hold at once; None: no limit of the team's own."""

    max_jobs: int | None = None
    max_chips: int | None = None


@dataclass(frozen=True)
class TeamQuotas:
    default: TeamLimits = TeamLimits()
    teams: Mapping[str, TeamLimits] = field(default_factory=dict)

    def of(self, team: str) -> TeamLimits:
        return self.teams.get(team, self.default)


@dataclass(frozen=True)
class JobClaim:
    """What admission needs to know of one job: whose it is, what it holds, and its place in line."""

    job_id: str
    team: str
    chips: int  # its TPU slice's chips; a cpu job holds none
    priority: str = "normal"
    seq: int = 0  # submission order on this launcher


@dataclass(frozen=True)
class Admission:
    job_id: str
    queue: QueueStatus | None  # None: it starts now

    @property
    def starts(self) -> bool:
        return self.queue is None


def chips_of(accelerator: str) -> int:
    """The chips a job of `accelerator` holds while it runs: its TPU slice's, none on cpu."""
    tpu = tpu_slice(accelerator)
    return tpu.chips if tpu else 0


def never_fits(team: str, chips: int, quotas: TeamQuotas) -> str | None:
    """Why a job of `chips` chips can never start for `team` (more than the team may hold), or None."""
    limit = quotas.of(team).max_chips
    if limit is not None and chips > limit:
        return f"the job needs {chips} TPU chips and team {team} may hold at most {limit} at once on this machine"
    return None


def admission_order(waiting: Sequence[JobClaim]) -> list[JobClaim]:
    return sorted(waiting, key=lambda c: (PRIORITY_ORDER.get(c.priority, PRIORITY_ORDER["normal"]), c.seq))


def admit(
    waiting: Sequence[JobClaim], running: Sequence[JobClaim], quotas: TeamQuotas, host_slots: int, host_chips: int | None = None
) -> list[Admission]:
    """For every waiting job: it starts now, or why it waits and where. Those that start come first,
    then those that wait, each in admission order. `host_chips`: the TPU chips jobs share on this
    machine (HostTpu.job_chips); None where nothing is known of them, as for a launcher that never
    had a TPU job to probe for."""
    team_jobs: dict[str, int] = {}
    team_chips: dict[str, int] = {}
    chip_holders = [claim for claim in running if claim.chips]
    for claim in running:
        team_jobs[claim.team] = team_jobs.get(claim.team, 0) + 1
        team_chips[claim.team] = team_chips.get(claim.team, 0) + claim.chips
    host_jobs = len(running)
    held = sum(claim.chips for claim in running)
    blocked: list[tuple[JobClaim, str]] = []  # (job, reason), in admission order
    started: list[str] = []
    for claim in admission_order(waiting):
        limits = quotas.of(claim.team)
        jobs, chips = team_jobs.get(claim.team, 0), team_chips.get(claim.team, 0)
        if limits.max_jobs is not None and jobs >= limits.max_jobs:
            blocked.append((claim, TEAM_JOB_LIMIT))
        elif limits.max_chips is not None and chips + claim.chips > limits.max_chips:
            blocked.append((claim, TEAM_CHIP_LIMIT))
        elif claim.chips and host_chips is not None and held + claim.chips > host_chips:
            blocked.append((claim, HOST_CHIPS))
        elif host_jobs >= host_slots:
            blocked.append((claim, HOST_SLOTS))
        else:
            started.append(claim.job_id)
            team_jobs[claim.team] = jobs + 1
            team_chips[claim.team] = chips + claim.chips
            host_jobs += 1
            held += claim.chips
            if claim.chips:
                chip_holders.append(claim)

    def why(claim: JobClaim, reason: str) -> str:  # the counts once this round's jobs have started
        limits, team = quotas.of(claim.team), claim.team
        if reason == TEAM_JOB_LIMIT:
            return f"{team} runs {team_jobs.get(team, 0)} of its {limits.max_jobs} concurrent jobs"
        if reason == TEAM_CHIP_LIMIT:
            return f"{team} holds {team_chips.get(team, 0)} of its {limits.max_chips} TPU chips and this job needs {claim.chips}"
        if reason == HOST_CHIPS:
            if not chip_holders:
                return f"this machine has {host_chips} TPU chip(s) and this job needs {claim.chips}"
            # Another team's job ids are not the waiting team's to see, as none of its jobs are.
            mine = [h.job_id for h in chip_holders if h.team == team]
            others = len(chip_holders) - len(mine)
            who = ", ".join(mine + ([f"{others} job(s) of other teams"] if others else []))
            return f"{held} of this machine's {host_chips} TPU chip(s) held by {who}; this job needs {claim.chips}"
        return f"this machine runs {host_jobs} of its {host_slots} concurrent jobs"

    answers = [Admission(job_id, None) for job_id in started]
    positions: dict[str, int] = {}
    for claim, reason in blocked:
        positions[claim.team] = positions.get(claim.team, 0) + 1
        queue = QueueStatus(name=f"team/{claim.team}", position=positions[claim.team], reason=reason, message=why(claim, reason))
        answers.append(Admission(claim.job_id, queue))
    return answers
