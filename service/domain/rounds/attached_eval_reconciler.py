"""The reconcile of evaluations attached to training jobs (attached_evals.py): the leader's `rljob-attached-evals` loop.

Each round works from what is stored, so a restarted service (or a new leader) makes whatever is missing:
- one narrow query for the (phase, last event seq) of every job that has not ended; a job's record is read when it
  is new to this process (whether it is a training job with evaluations attached, or one of their eval jobs, never
  changes) and a job that concerns an attached evaluation is looked at again when its version moved (a checkpoint
  was folded, it changed phase) or when it left that set (it ended);
- until it has been through them once after each start, a page a round of the jobs labelled
  `rljob.dev/attached-evals` that have ended: one that ended while no service was looking (a crash between its last
  write and this loop's next round) is not in the query above, and is not settled;
- for each job so found: submit each wanted eval job that does not exist yet (JobService.submit, Idempotency-Key
  `attached-eval:<id>:<label>`, so two rounds or two replicas never make two), then rebuild its view of them (each
  eval job's phase and scores; against the base eval, the paired comparison once both SUCCEEDED, read from their
  outcomes files by eval_compare.compare_evals) and store it on the job when it changed.
It runs in a thread of its own: a comparison's bootstrap is pure Python (seconds for GSM8K's 1319 rows), which must
not hold up observations or progress. Nothing here runs on a replica that does not lead.
"""

from __future__ import annotations

import logging

from service.domain.cost.usage import DEFAULT_PRICES_USD_PER_CHIP_HOUR, job_usage
from service.domain.evals.attached_evals import (
    ATTACHED_LABEL,
    ATTACHED_VALUE,
    EVAL_OF_LABEL,
    attached_eval_spec,
    attached_label,
    eval_entry,
    idempotency_key,
    label_order,
    settled,
    wanted_evals,
)
from service.domain.evals.eval_compare import compare_evals
from service.domain.job_service import JobService
from service.domain.records.attached_eval_models import AttachedEvalPublic
from service.domain.records.errors import DomainError, EvalsNotComparable, RunFileRefused, RunFilesUnavailable
from service.domain.records.models import Caller, JobFilters, JobRecord
from service.domain.records.phases import TERMINAL, JobPhase
from service.domain.records.ports import Clock, JobStore, RunFiles
from service.domain.records.usage_models import JobUsage

log = logging.getLogger(__name__)

ACTIVE: frozenset[JobPhase] = frozenset(JobPhase) - TERMINAL
SWEEP_PAGE = 100  # ended jobs with evaluations attached read per round until the sweep after a start is through
MAX_ATTACHED = 1100  # a job's eval jobs read at once: its base, export and up to MAX_CHECKPOINTS_KEPT checkpoints
SUBMITTER = "rljob attached evals"


class AttachedEvalReconciler:
    """Reads the jobs from `store` and the eval jobs' outcomes files from `run_files`; submits the eval jobs and
    stores each job's view of them through `jobs` (submit, record_attached_evals)."""

    def __init__(
        self, jobs: JobService, store: JobStore, run_files: RunFiles | None, *, clock: Clock, sweep_page: int = SWEEP_PAGE
    ) -> None:
        self.jobs = jobs
        self.store = store
        self.run_files = run_files
        self.clock = clock
        self.sweep_page = sweep_page
        self._concerns: dict[str, str | None] = {}  # job id -> the training job it concerns (itself, or its parent)
        self._versions: dict[str, tuple[JobPhase, int]] = {}  # active job id -> its version at this process's last look
        self._sweep_before: int | None = None
        self._swept = False
        self._retry: set[str] = set()  # jobs whose comparison could not read an outcomes file: tried again next round

    def restart(self) -> None:
        """Forget what this process saw: a new term of leadership looks at everything again."""
        self._concerns.clear()
        self._versions.clear()
        self._sweep_before, self._swept = None, False
        self._retry.clear()

    def reconcile_once(self) -> None:
        if not self.jobs.leads():
            return
        due, self._retry = self._retry, set()
        versions = self.store.job_versions(ACTIVE)
        for job_id in self._versions.keys() - versions.keys():  # ended (or gone) since the last round
            del self._versions[job_id]
            if (parent := self._concerns.pop(job_id, None)) is not None:
                due.add(parent)
        for job_id, version in versions.items():
            if self._versions.get(job_id) == version:
                continue
            self._versions[job_id] = version
            if job_id not in self._concerns:
                record = self.store.get(job_id)
                self._concerns[job_id] = _concerned(record) if record is not None else None
            if (parent := self._concerns[job_id]) is not None:
                due.add(parent)
        if not self._swept:
            due |= self._sweep_ended()
        for parent_id in sorted(due):
            try:
                self.reconcile_job(parent_id)
            except Exception:  # one job's trouble must not keep the others' evaluations from being made
                log.exception("reconciling the evaluations attached to %s failed; looked at again when it changes", parent_id)

    def _sweep_ended(self) -> set[str]:
        filters = JobFilters(labels=((ATTACHED_LABEL, ATTACHED_VALUE),))
        page = self.store.list_jobs(filters, before_pk=self._sweep_before, limit=self.sweep_page)
        if len(page) < self.sweep_page:
            self._swept = True
        if page:
            self._sweep_before = page[-1][0]
        return {record.id for _, record in page if record.phase.is_terminal() and not settled(record)}

    def reconcile_job(self, parent_id: str) -> None:
        """Make the job's missing eval jobs, then store its view of them if that changed."""
        if not self.jobs.leads():
            return
        parent = self.store.get(parent_id)
        if parent is None or parent.spec.eval is None:
            return
        children = self._attached_to(parent)
        notes: dict[str, str] = {}
        for wanted in wanted_evals(parent):
            if wanted.label in children:
                continue
            base = children.get("base")
            try:
                spec = attached_eval_spec(parent, wanted, base.id if base is not None else None)
                caller = Caller(team=parent.team, token_id=SUBMITTER, name=f"{SUBMITTER} of {parent.id}")
                child, created = self.jobs.submit(caller, spec, idempotency_key(parent.id, wanted.label))
            except DomainError as e:  # refused (the location policy, the backend's check): say so on the job
                log.warning("the %s eval of %s was not submitted: %s", wanted.label, parent.id, e)
                notes[wanted.label] = f"not submitted: {e}"
                continue
            children[wanted.label] = child
            if created:
                log.info("submitted %s, the %s eval of %s", child.id, wanted.label, parent.id)
        evals = self._view(parent, children, notes)
        if evals != parent.report.attached_evals:
            self.jobs.record_attached_evals(parent.id, evals)

    def _attached_to(self, parent: JobRecord) -> dict[str, JobRecord]:
        """The job's attached eval jobs by label (eval jobs submitted by hand of its checkpoints are not among them)."""
        filters = JobFilters(labels=((EVAL_OF_LABEL, parent.id),))
        found: dict[str, JobRecord] = {}
        for _, record in self.store.list_jobs(filters, before_pk=None, limit=MAX_ATTACHED):
            label = attached_label(record)
            if label is not None and record.team == parent.team:
                found[label] = record
        return found

    def _view(self, parent: JobRecord, children: dict[str, JobRecord], notes: dict[str, str]) -> list[AttachedEvalPublic]:
        labels = sorted({*children, *notes}, key=label_order)
        base = children.get("base")
        evals = []
        for label in labels:
            child = children.get(label)
            entry = eval_entry(label, child, note=notes.get(label))
            if child is not None and base is not None and label != "base":
                entry = self._compared(entry, child, base, parent)
            evals.append(entry)
        return evals

    def _compared(self, entry: AttachedEvalPublic, child: JobRecord, base: JobRecord, parent: JobRecord) -> AttachedEvalPublic:
        if child.phase is not JobPhase.SUCCEEDED or base.phase is not JobPhase.SUCCEEDED:
            return entry
        kept = {e.label: e for e in parent.report.attached_evals}.get(entry.label)
        if kept is not None and kept.eval_id == child.id and kept.vs_base is not None:
            return entry.model_copy(update={"vs_base": kept.vs_base})  # two finished evals compare the same forever
        now = self.clock()

        def usage_of(record: JobRecord) -> JobUsage:
            return job_usage(record, now, DEFAULT_PRICES_USD_PER_CHIP_HOUR)

        try:
            found = compare_evals(self.run_files, child, base, usage_of=usage_of)
        except (EvalsNotComparable, RunFileRefused) as e:
            return entry.model_copy(update={"note": f"not compared with the base eval: {e}"})
        except RunFilesUnavailable:
            self._retry.add(parent.id)  # the storage may be back next round; no note, so the job is not settled
            return entry
        return entry.model_copy(update={"vs_base": found.comparison})


def _concerned(record: JobRecord) -> str | None:
    """The training job whose evaluations this job's changes concern: itself when it has some attached, its
    parent when it is one of them, else None."""
    if record.spec.eval is not None:
        return record.id
    if attached_label(record) is not None and record.spec.evaluation is not None:
        return record.spec.evaluation.checkpoint.job_id
    return None
