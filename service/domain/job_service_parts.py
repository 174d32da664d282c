"""What a JobService is built from (job_service.py): the ports it talks to, the policies it decides with, and the
pacing of its status mirror and event folds, each a frozen group so a caller names only what differs."""

from __future__ import annotations

from dataclasses import dataclass, field

from service.domain.cost.budget_ledger import BudgetLedger
from service.domain.cost.usage import DEFAULT_PRICES_USD_PER_CHIP_HOUR, PriceTable
from service.domain.health.learning_health import HealthPolicy
from service.domain.records.ports import JobLauncher, JobStore, ProgressSource, RunFiles

from .fold_pacer import FoldPacer
from .location_policy import UNRESTRICTED, LocationPolicy

DEFAULT_HEALTH_POLICY = HealthPolicy()


@dataclass(frozen=True)
class JobPorts:
    """The boundaries the service talks to (records/ports.py): where jobs are stored, what runs them, where their
    trainer events are read, and their run directories (None: no artifacts, samples or stage logs are read)."""

    store: JobStore
    launcher: JobLauncher
    progress: ProgressSource
    run_files: RunFiles | None = None


@dataclass(frozen=True)
class JobPolicies:
    """What the service decides with: a job's learning health, where it may run, the teams' budgets (None: none, a
    ledger with no budgets) and the prices its estimate uses, and how often a lost or hung workload is started again
    (hung restarts: after the trainer's watchdog found it hung, hangs.py)."""

    health: HealthPolicy = DEFAULT_HEALTH_POLICY
    location: LocationPolicy = UNRESTRICTED
    budgets: BudgetLedger | None = None
    prices: PriceTable = field(default_factory=lambda: DEFAULT_PRICES_USD_PER_CHIP_HOUR)  # the table itself, not a copy
    max_resumes: int = 3
    max_hung_restarts: int = 2

    def budget_ledger(self, store: JobStore) -> BudgetLedger:
        """The teams' budgets on `store`; none set: a ledger with no budgets (no submission refused, no job held)."""
        return self.budgets or BudgetLedger(store, {}, DEFAULT_PRICES_USD_PER_CHIP_HOUR)


@dataclass(frozen=True)
class Pacing:
    """How often the status mirror writes a job's status to its workload (status_mirror.py), and the share of the CPU
    folding trainer events may take (fold_pacer.py; None: all of it, folds still in chunks)."""

    mirror_every_steps: int = 10
    mirror_interval_s: float = 30.0
    fold_pacer: FoldPacer | None = None


DEFAULT_POLICIES = JobPolicies()
DEFAULT_PACING = Pacing()
