"""Request dependencies as Annotated aliases, so routes declare what they need and nothing more.

Dependencies that do no I/O are `async def`: FastAPI runs a sync dependency on the thread pool, and
those hops, not the work, were most of a status read's cost. A remembered token (TokenCache) is
checked on the event loop; only a token read from the store and the job read itself take a thread.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Path, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from service.domain.errors import JobNotFound, NotReady
from service.domain.job_service import JobService
from service.domain.models import Caller, JobRecord
from service.runtime import Runtime
from trainer.contract import JOB_ID_RE

from .overload import CALLER_STATE


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
