"""Request dependencies as Annotated aliases, so routes declare what they need and nothing more: each
is one piece of the app's ApiServing (service/api/serving.py), never the whole of it or the runtime.

Dependencies that do no I/O are `async def`: FastAPI runs a sync dependency on the thread pool, and
those hops, not the work, were most of a status read's cost. A remembered token (TokenCache) is
checked on the event loop; only a token read from the store and the job read itself take a thread.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from fastapi import Depends, Path, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from service.config import Settings
from service.domain.job_service import JobService
from service.domain.records.errors import JobNotFound, NotReady
from service.domain.records.models import Caller, JobPublic, JobRecord
from service.domain.records.ports import Clock, JobStore
from service.domain.webhooks.webhook_models import WebhookQueue
from service.unauthenticated_connections import mark_authenticated
from trainer.contract import JOB_ID_RE

from .event_fanout import EventFanout
from .job_views import JobViews
from .log_follow import LogFollowers
from .metrics import ServiceMetrics
from .overload import CALLER_STATE
from .serving import ApiServing


def serving_of(request: Request) -> ApiServing:
    serving: ApiServing | None = getattr(request.app.state, "serving", None)
    if serving is None:
        raise NotReady()
    return serving


def _piece[T](read: Callable[[ApiServing], T]) -> object:
    """A dependency answering one piece of the app's ApiServing."""

    async def dependency(request: Request) -> T:
        return read(serving_of(request))

    return Depends(dependency)


SettingsDep = Annotated[Settings, _piece(lambda s: s.settings)]
ClockDep = Annotated[Clock, _piece(lambda s: s.clock)]
StoreDep = Annotated[JobStore, _piece(lambda s: s.store)]
ViewsDep = Annotated[JobViews, _piece(lambda s: s.views)]
FanoutDep = Annotated[EventFanout, _piece(lambda s: s.fanout)]
LogFollowersDep = Annotated[LogFollowers, _piece(lambda s: s.log_followers)]
MetricsDep = Annotated[ServiceMetrics, _piece(lambda s: s.metrics)]
# The job as the API shows it now (health thresholds and prices from the settings).
WebhookQueueDep = Annotated[WebhookQueue | None, _piece(lambda s: s.webhooks)]
PublicDep = Annotated[Callable[[JobRecord], JobPublic], _piece(lambda s: s.public)]

_bearer = HTTPBearer(auto_error=False, description="an API token from `rljob token create` or `rljob serve`")


async def get_caller(request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]) -> Caller:
    checked: Caller | None = getattr(request.state, CALLER_STATE, None)  # the load shedder checked the token
    if checked is not None:
        return checked
    tokens = serving_of(request).tokens
    header = f"{credentials.scheme} {credentials.credentials}" if credentials else None
    caller = tokens.cached_caller(header)
    if caller is None:
        caller = await run_in_threadpool(tokens.authenticate, header)
    mark_authenticated(request.scope)  # a log follow's: the load shedder does not see those
    return caller


CallerDep = Annotated[Caller, Depends(get_caller)]


JobServiceDep = Annotated[JobService, _piece(lambda s: s.jobs)]


async def require_ready(request: Request) -> None:
    if serving_of(request).readiness.not_ready_reason() is not None:
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
