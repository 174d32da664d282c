"""Maps domain exceptions to HTTP responses: the one place status codes for errors are chosen.

Bodies are `{"detail": ...}` like FastAPI's own (ErrorPublic); validation errors list every bad field
with its location and reason (ValidationErrorPublic), without echoing the submitted value back (it
may be huge or hostile). Unexpected errors become a 500 with a request id and no traceback; the
traceback goes to the log. `error_responses()` declares in the OpenAPI schema the errors a route
can really return, with these bodies and headers, so a generated client knows them (api/openapi.py
adds the bodies' schemas).
"""

from __future__ import annotations

import logging
import re
import uuid
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from service.domain.records import errors as e

log = logging.getLogger(__name__)

RETRY_AFTER_S = 2


class ErrorPublic(BaseModel):
    """Every error response but a validation error."""

    detail: str = Field(description="what went wrong and what to do next")


class FieldProblem(BaseModel):
    loc: list[str | int] = Field(description="where: body/query/path/header, then the field's path")
    msg: str = Field(description="why the value was refused")
    type: str = Field(description="machine-readable kind, e.g. missing, string_pattern_mismatch")


class ValidationErrorPublic(BaseModel):
    """422: every bad field at once."""

    detail: list[FieldProblem]


_RETRY_AFTER = {"Retry-After": {"description": "seconds to wait before retrying", "required": True, "schema": {"type": "integer"}}}
_WWW_AUTHENTICATE = {"WWW-Authenticate": {"description": "Bearer", "required": True, "schema": {"type": "string"}}}
_DEFAULT_REASONS: dict[int, str] = {
    400: "the cursor is not one this service issued",
    401: "no bearer token, a malformed one, or an unknown or revoked token",
    403: "the token is valid but not an admin's, and this is for admins only",
    404: "no such job visible to your team (another team's job looks the same)",
    409: "the request conflicts with the job's state",
    413: "the request body is over the service's size limit",
    422: "a parameter, header or body field is invalid; every problem is listed",
    429: "too many requests of this kind at once; retry after Retry-After",
    503: "the service is re-attaching to running jobs after a start, or its database is unreachable; retry",
}


def error_responses(*codes: int, reasons: dict[int, str] | None = None) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` for the error statuses a route returns, each with the body it sends."""
    reasons = {**_DEFAULT_REASONS, **(reasons or {})}
    declared: dict[int | str, dict[str, Any]] = {}
    for code in codes:
        # application/json even on a streaming route (logs, SSE): errors come before any stream starts.
        model = ValidationErrorPublic if code == 422 else ErrorPublic
        schema = {"$ref": f"#/components/schemas/{model.__name__}"}
        entry: dict[str, Any] = {"description": reasons[code], "content": {"application/json": {"schema": schema}}}
        if code == 401:
            entry["headers"] = _WWW_AUTHENTICATE
        elif code in (429, 503):
            entry["headers"] = _RETRY_AFTER
        declared[code] = entry
    return declared


_STATUS: dict[type[e.DomainError], int] = {
    e.JobNotFound: 404,
    e.IllegalTransition: 409,
    e.NotCancellable: 409,
    e.IdempotencyConflict: 409,
    e.BadCursor: 400,
    e.NotReady: 503,
    e.Unauthenticated: 401,
    e.AdminOnly: 403,
    e.StoreUnavailable: 503,
    e.TooManyLogFollowers: 429,
    e.SamplesNotFound: 404,
    e.ReproNotFound: 404,
    e.RunFilesUnavailable: 503,
    e.RunFileRefused: 409,
    e.EvalsNotComparable: 409,
    e.LeaderFenced: 503,
}


def validation_detail(errors: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"loc": list(err.get("loc", ())), "msg": err.get("msg", ""), "type": err.get("type", "")} for err in errors]


def _domain_error(request: Request, exc: Exception) -> JSONResponse:
    if isinstance(exc, e.InvalidRequest):
        return JSONResponse(status_code=422, content={"detail": [{"loc": list(exc.loc), "msg": str(exc), "type": "value_error"}]})
    status = next((code for cls, code in _STATUS.items() if isinstance(exc, cls)), 400)
    headers = {}
    if status == 401:
        headers["WWW-Authenticate"] = "Bearer"
    if status in (429, 503):
        headers["Retry-After"] = str(RETRY_AFTER_S)
    return JSONResponse(status_code=status, content={"detail": str(exc)}, headers=headers)


def _request_validation_error(request: Request, exc: Exception) -> JSONResponse:
    errors = list(exc.errors()) if isinstance(exc, RequestValidationError) else []
    return JSONResponse(status_code=422, content={"detail": validation_detail(errors)})


def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    request_id = uuid.uuid4().hex[:12]
    log.error("unhandled error (request %s) on %s %s", request_id, request.method, request.url.path, exc_info=exc)
    return JSONResponse(status_code=500, content={"detail": f"internal error; quote request id {request_id} when reporting it"})


async def _http_error(request: Request, exc: Exception) -> Response:
    """FastAPI's own answer, with two corrections. A body it could not decode (not UTF-8) is bad
    input like any other: 422 naming the body, not a bare 400. A 405's Allow lists every method the
    schema declares at that path: Starlette names only the first matching route's (GET /v1/jobs
    answered `Allow: GET`)."""
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code == 400 and exc.__cause__ is not None:  # FastAPI's "error parsing the body"
        problem = {"loc": ["body"], "msg": f"the body is not UTF-8 encoded JSON ({type(exc.__cause__).__name__})", "type": "json_invalid"}
        return JSONResponse(status_code=422, content={"detail": [problem]})
    allowed = _declared_methods(request) if exc.status_code == 405 else None
    if allowed:
        exc.headers = {**(exc.headers or {}), "Allow": ", ".join(allowed)}
    return await http_exception_handler(request, exc)


def _declared_methods(request: Request) -> list[str] | None:
    """The methods /openapi.json declares for the request's path; None for a path it does not list."""
    path = request.scope["path"]
    for template, operations in request.app.openapi()["paths"].items():
        pattern = "[^/]+".join(re.escape(part) for part in re.split(r"\{[^/}]+\}", template))
        if re.fullmatch(pattern, path):
            return sorted(method.upper() for method in operations)
    return None


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(e.DomainError, _domain_error)
    app.add_exception_handler(RequestValidationError, _request_validation_error)
    app.add_exception_handler(Exception, _unexpected)
