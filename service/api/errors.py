"""Maps domain exceptions to HTTP responses: the one place status codes for errors are chosen.

Bodies are `{"detail": ...}` like FastAPI's own; validation errors list every bad field with its
location and reason, without echoing the submitted value back (it may be huge or hostile).
Unexpected errors become a 500 with a request id and no traceback; the traceback goes to the log.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from service.domain import errors as e

log = logging.getLogger(__name__)

_STATUS: dict[type[e.DomainError], int] = {
    e.JobNotFound: 404,
    e.IllegalTransition: 409,
    e.NotCancellable: 409,
    e.IdempotencyConflict: 409,
    e.BadCursor: 400,
    e.NotReady: 503,
    e.Unauthenticated: 401,
    e.Forbidden: 403,
    e.LaunchFailed: 502,
    e.StoreUnavailable: 503,
    e.TooManyLogFollowers: 429,
    e.SamplesNotFound: 404,
    e.RunFilesUnavailable: 503,
}


def validation_detail(errors: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"loc": list(err.get("loc", ())), "msg": err.get("msg", ""), "type": err.get("type", "")} for err in errors]


def _domain_error(request: Request, exc: Exception) -> JSONResponse:
    if isinstance(exc, e.InvalidRequest):
        return JSONResponse(
            status_code=422, content={"detail": [{"loc": list(exc.loc), "msg": str(exc), "type": "value_error"}]}
        )
    status = next((code for cls, code in _STATUS.items() if isinstance(exc, cls)), 400)
    headers = {}
    if status == 401:
        headers["WWW-Authenticate"] = "Bearer"
    if status in (429, 503):
        headers["Retry-After"] = "2"
    return JSONResponse(status_code=status, content={"detail": str(exc)}, headers=headers)


def _request_validation_error(request: Request, exc: Exception) -> JSONResponse:
    errors = list(exc.errors()) if isinstance(exc, RequestValidationError) else []
    return JSONResponse(status_code=422, content={"detail": validation_detail(errors)})


def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    request_id = uuid.uuid4().hex[:12]
    log.error("unhandled error (request %s) on %s %s", request_id, request.method, request.url.path, exc_info=exc)
    return JSONResponse(
        status_code=500, content={"detail": f"internal error; quote request id {request_id} when reporting it"}
    )


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(e.DomainError, _domain_error)
    app.add_exception_handler(RequestValidationError, _request_validation_error)
    app.add_exception_handler(Exception, _unexpected)
