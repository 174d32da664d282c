"""Request dependencies as Annotated aliases, so routes declare what they need and nothing more.

Dependencies that do no I/O are `async def`: FastAPI runs a sync dependency on the thread pool, and
those hops, not the work, were most of a status read's cost. A remembered token (TokenCache) is
checked on the event loop; only a token read from the store and the job read itself take a thread.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated

from fastapi import Depends, Path, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from service.change_notifier import ChangeNotifier
from service.config import Settings
from service.domain.errors import JobNotFound, NotReady
from service.domain.job_service import JobService
from service.domain.models import Caller, JobPublic, JobRecord
from service.domain.ports import Clock, JobStore
from service.domain.self_check import SelfCheckReport
from service.domain.tokens import TokenService
from service.domain.views import to_public
from service.leadership import Leadership
from service.supervisor import Supervisor
from trainer.contract import JOB_ID_RE

from .job_views import JobViews
from .log_follow import LogFollowers
from .metrics import ServiceMetrics
from .overload import CALLER_STATE


@dataclass
class Runtime:
    """Everything the routes use, built once by the app's lifespan (app.py)."""

    settings: Settings
    store: JobStore
    jobs: JobService
    tokens: TokenService
    notifier: ChangeNotifier
    supervisor: Supervisor
    leadership: Leadership
    metrics: ServiceMetrics
    clock: Clock
    log_followers: LogFollowers = field(default_factory=lambda: LogFollowers(32))
    self_checks: SelfCheckReport = field(default_factory=SelfCheckReport)  # start-up checks (/readyz shows them)
    views: JobViews = field(init=False)  # the status read's and list page's JSON (api/job_views.py)

    def __post_init__(self) -> None:
        self.views = JobViews(self.jobs, self.public_at, self.clock)

    def not_ready_reason(self) -> str | None:
        """Why this replica cannot take submissions yet: only a leader still re-attaching jobs cannot
        (a follower stores them and the leader hands them over)."""
        if not self.leadership.leads or self.supervisor.ready.is_set():
            return None
        error = self.supervisor.recovery_error
        return f"recovery failed: {error}" if error else "recovering jobs"

    def public(self, record: JobRecord) -> JobPublic:
        """The job as the API shows it now: health judged by the configured thresholds, cost by the price table."""
        return self.public_at(record, self.clock())

    def public_at(self, record: JobRecord, now: datetime) -> JobPublic:
        return to_public(record, now, self.jobs.health_policy, self.settings.usage_prices_usd_per_chip_hour)


async def get_runtime(request: Request) -> Runtime:
    runtime: Runtime | None = getattr(request.app.state, "runtime", None)
    if runtime is None:
        raise NotReady()
    return runtime


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]

_bearer = HTTPBearer(auto_error=False, description="an API token from `rljob token create` or `rljob serve`")


async def get_caller(
    request: Request, runtime: RuntimeDep, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> Caller:
    checked: Caller | None = getattr(request.state, CALLER_STATE, None)  # the load shedder checked the token
    if checked is not None:
        return checked
    header = f"{credentials.scheme} {credentials.credentials}" if credentials else None
    caller = runtime.tokens.cached_caller(header)
    if caller is None:
        caller = await run_in_threadpool(runtime.tokens.authenticate, header)
    return caller


CallerDep = Annotated[Caller, Depends(get_caller)]


async def get_job_service(runtime: RuntimeDep) -> JobService:
    return runtime.jobs


JobServiceDep = Annotated[JobService, Depends(get_job_service)]


async def require_ready(runtime: RuntimeDep) -> None:
    if runtime.not_ready_reason() is not None:
        raise NotReady()


ReadyDep = Annotated[None, Depends(require_ready)]


JobIdPath = Annotated[str, Path(max_length=64, description="rl- and 12 lowercase letters or digits")]


def get_visible_job(
    job_id: JobIdPath,
    caller: CallerDep,
    jobs: JobServiceDep,
) -> JobRecord:
    """The job, if the caller's team may see it; anything else (malformed id included) is 404.
    Sync: the one thread-pool hop of a request that reads a job."""
    if not JOB_ID_RE.match(job_id):
        raise JobNotFound(job_id)
    return jobs.get(caller, job_id)


VisibleJobDep = Annotated[JobRecord, Depends(get_visible_job)]
