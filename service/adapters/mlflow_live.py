"""The live MLflow export (RLJOB_MLFLOW_TRACKING_URI): the leader writes each job's run while the job runs.

One leader round (service/leader_rounds.py), run by the leader's supervisor while this replica leads.
Each pass reads the job event log past where it last read (every new metric point, evaluation and phase
change appends an event), so the jobs with something new are known without scanning them; it then exports
at most JOBS_PER_PASS of them through the same mapping `rljob export mlflow` uses (service/domain/
mlflow_runs.py), with the job's data read from the store and run directory exactly as the API shows it.

Incremental and restart-safe without a table of its own: the run is found by its `rljob.job_id` tag, and
only points past the run's `rljob.export_cursor` tag are logged. Samples, the job and the repro record go
up as artifacts once the job has ended, when the run is ended too (FINISHED, FAILED or KILLED). When a term
starts, the jobs still active and the runs MLflow still shows RUNNING are looked at again, so a job that
ended while no leader exported gets its last points and its end. A job that ran from start to end while no
replica led is not exported live: `rljob export mlflow ID` writes it.

Failures (a tracking server down, a refused write) are logged with what to do, and the job is tried again
next pass; nothing here writes to a job or the store, so the jobs and the API never see them.
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from service.domain.job_repro import read_job_repro
from service.domain.job_samples import read_job_samples
from service.domain.mlflow_runs import (
    JOB_ID_TAG,
    MLFLOW_HTTP_DEFAULTS,
    JobExport,
    experiment_id,
    write_export,
)
from service.domain.records.errors import ReproNotFound, RunFileRefused, SamplesNotFound
from service.domain.records.models import JobPublic, JobRecord
from service.domain.records.phases import JobPhase
from service.domain.records.ports import JobStore, RunFiles
from service.leader_rounds import LeaderRound, RoundOf

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

log = logging.getLogger(__name__)

JOBS_PER_PASS = 20  # the rest wait for the next pass, which comes at once
EVENTS_PER_PASS = 5000
RUNNING_RUNS_LOOKED_AT = 1000  # per term start: runs left RUNNING, whose jobs may have ended meanwhile
MAX_METRIC_POINTS = 100_000  # as GET /metrics, what the CLI export reads
SAMPLE_STEPS = 5  # the newest steps' samples, as the CLI's default --sample-steps
ACTIVE = (JobPhase.LAUNCHING, JobPhase.RUNNING, JobPhase.CANCELLING)  # a queued job has nothing to show yet


class MlflowLiveExport:
    def __init__(
        self,
        store: JobStore,
        run_files: RunFiles | None,
        public: Callable[[JobRecord], JobPublic],
        *,
        tracking_uri: str,
        experiment: str,
        interval_s: float,
        jobs_per_pass: int = JOBS_PER_PASS,
    ) -> None:
        self.store = store
        self.run_files = run_files
        self.public = public
        self.tracking_uri = tracking_uri
        self.experiment = experiment
        self.interval_s = interval_s
        self.jobs_per_pass = jobs_per_pass
        self.metrics_logged: Counter[str] = Counter()  # per job, this process: what a test or an operator can read
        self.last_error: str | None = None
        self._client: MlflowClient | None = None
        self._experiment_id: str | None = None
        self._after_seq: int | None = None  # the event log read up to here; None: a term starts
        self._pending: set[str] = set()

    def rounds(self) -> list[LeaderRound]:
        """The leader's export round; none, and an error saying why, without MLflow's client installed."""
        try:
            import mlflow.tracking  # noqa: F401 - only to know it is there
        except ImportError:
            log.error(
                "RLJOB_MLFLOW_TRACKING_URI is set but MLflow's client is not installed: jobs are not exported "
                "to MLflow; install it (pip install 'rljob[mlflow]', mlflow-skinny) or unset the variable"
            )
            return []
        return [RoundOf("rljob-mlflow-export", "exporting jobs to MLflow", self.interval_s, self.export_once, on_restart=self._restart)]

    def _restart(self) -> None:
        """A term starts: read the event log from its start again (what the last term exported is found exported)."""
        for name, value in MLFLOW_HTTP_DEFAULTS.items():
            os.environ.setdefault(name, value)
        self._after_seq = None
        self._pending.clear()

    def export_once(self) -> float | None:
        """One pass: find the jobs with something new, export up to jobs_per_pass of them. Returns 0 (go again
        at once) while jobs are left over, None (the interval) otherwise; a failed pass waits the interval."""
        try:
            client, experiment = self._connect()
            self._collect(client, experiment)
        except Exception as e:  # noqa: BLE001 - the tracking server down or refusing: the next pass tries again
            self._failed("cannot reach it", e)
            return None
        for job_id in sorted(self._pending)[: self.jobs_per_pass]:
            try:
                self._export(client, experiment, job_id)
            except Exception as e:  # noqa: BLE001 - one job's export failing never reaches the job or the API
                self._failed(f"cannot export job {job_id}", e)
                return None  # the rest likely fail alike (a server gone): try them all next pass, not each now
            self._pending.discard(job_id)
        self.last_error = None
        return 0.0 if self._pending else None

    def _connect(self) -> tuple[MlflowClient, str]:
        """The client and the experiment's id, kept once had (the experiment is created when missing)."""
        if self._client is None:
            from mlflow.tracking import MlflowClient

            self._client = MlflowClient(tracking_uri=self.tracking_uri)
        if self._experiment_id is None:
            self._experiment_id = experiment_id(self._client, self.experiment, None)
        return self._client, self._experiment_id

    def _collect(self, client: MlflowClient, experiment: str) -> None:
        """Add to the pending jobs those with events past the last read; at a term's start, the active ones and
        those whose runs are still RUNNING instead (what happened before this term is not in memory)."""
        if self._after_seq is None:
            after = self.store.max_event_seq()
            self._pending |= set(self.store.job_versions(ACTIVE))
            running = client.search_runs([experiment], filter_string="attributes.status = 'RUNNING'", max_results=RUNNING_RUNS_LOOKED_AT)
            self._pending |= {run.data.tags[JOB_ID_TAG] for run in running if JOB_ID_TAG in run.data.tags}
            self._after_seq = after
            return
        events = self.store.events_after(self._after_seq, limit=EVENTS_PER_PASS)
        self._pending |= {e.job_id for e in events}
        if events:
            self._after_seq = events[-1].seq

    def _export(self, client: MlflowClient, experiment: str, job_id: str) -> None:
        record = self.store.get(job_id)
        if record is None or record.phase == JobPhase.QUEUED:  # gone, or nothing to show until it starts
            return
        ended = record.phase.is_terminal()
        job = self.public(record).model_dump(mode="json")
        points = [p.model_dump(mode="json") for p in self.store.metric_points(job_id, limit=MAX_METRIC_POINTS)]
        export = JobExport(
            job=job, metric_points=points, samples=self._samples(record) if ended else [], repro=self._repro(record) if ended else None
        )
        result = write_export(client, export, experiment, trust_cursor=True, with_artifacts=ended)
        self.metrics_logged[job_id] += result.metrics_logged
        if result.metrics_logged or ended:
            log.info(
                "MLflow run %s of job %s: %d metric points logged%s",
                result.run_id,
                job_id,
                result.metrics_logged,
                f", ended {record.phase.value}" if ended else "",
            )

    def _samples(self, record: JobRecord) -> list[dict[str, Any]]:
        """The newest steps' samples, as `rljob export mlflow` writes them; none where the run has none readable."""
        try:
            newest = read_job_samples(self.run_files, record, None)
        except (SamplesNotFound, RunFileRefused):
            return []
        pages = []
        for step in newest.steps_available[-SAMPLE_STEPS:]:
            try:
                page = newest if step == newest.step else read_job_samples(self.run_files, record, step)
            except (SamplesNotFound, RunFileRefused):
                continue
            pages.append(page.model_dump(mode="json"))
        return pages

    def _repro(self, record: JobRecord) -> dict[str, Any] | None:
        try:
            return read_job_repro(self.run_files, record).model_dump(mode="json")
        except (ReproNotFound, RunFileRefused):
            return None

    def _failed(self, what: str, error: Exception) -> None:
        """Log what failed and what to do; the same failure pass after pass only once (at DEBUG after that)."""
        message = f"{what} ({error.__class__.__name__}: {str(error)[:500]})"
        level = logging.DEBUG if message == self.last_error else logging.WARNING
        self.last_error = message
        log.log(
            level,
            "MLflow export to %s: %s; trying again every %gs. Jobs are not affected. Check that the "
            "tracking server is up and reachable from the service, or unset RLJOB_MLFLOW_TRACKING_URI to stop "
            "exporting; `rljob export mlflow ID` exports a job by hand.",
            self.tracking_uri,
            message,
            self.interval_s,
        )
