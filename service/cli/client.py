"""The CLI's HTTP client: one place that turns transport and HTTP errors into clear messages, and that reads
each API answer into the model the service wrote it from (JobPublic, JobsPublic, UsagePublic, ...), so a command
reads typed fields, never string keys. `request` stays for what has no model (the readiness probe, a log page)."""

from __future__ import annotations

import enum
import functools
import os
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import typer
import yaml
from httpx_sse import SSEError, connect_sse
from pydantic import BaseModel
from rich.console import Console
from rich.markup import escape

from service.domain.records.estimate_models import JobEstimate
from service.domain.records.eval_models import EvalComparisonPublic, EvalPublic
from service.domain.records.models import JobPublic, JobsPublic, MetricsPublic, SamplesPublic
from service.domain.records.usage_models import UsagePublic
from service.domain.run_diff import JobDiff
from service.domain.webhooks.webhook_models import WebhookDeliveriesPublic
from service.settings_env import SettingsInvalid
from trainer.contract import JobSpec, ReproRecord
from trainer.contract.spec.base import STORED_SPEC_CONTEXT

from .service_address import ServiceAddress

DEFAULT_URL = "http://127.0.0.1:8765"


def read_answer[Answer: BaseModel](model: type[Answer], body: Any) -> Answer:
    """An API answer read into its model, ignoring fields this CLI does not know at every depth (the models, the job's
    spec among them, forbid unknown fields where they take input): a newer service adding a field must not break an
    older CLI reading it. Its specs are stored ones, read as the store reads them: a refusal added after a job was
    submitted does not make that job unreadable."""
    return model.model_validate(body, extra="ignore", context=STORED_SPEC_CONTEXT)


class CliExit(enum.IntEnum):
    """What the `rljob` command line exits with; `rljob --help` and docs/settings.md list these (a test keeps them
    equal). Not the trainer's ExitCode (trainer/contract/run/exit_codes.py), which is what a job's pod exits with."""

    OK = 0
    FAILED = 1
    BAD_INPUT = 2  # the same as click's own usage errors, so every kind of bad input reads alike
    UNREACHABLE = 3
    TOKEN_REJECTED = 4


CLI_EXIT_MEANINGS: dict[CliExit, str] = {
    CliExit.OK: "ok",
    CliExit.FAILED: "the job failed or was cancelled, or the service refused the request",
    CliExit.BAD_INPUT: "bad input: an invalid spec, option, setting or config file",
    CliExit.UNREACHABLE: "the service cannot be reached",
    CliExit.TOKEN_REJECTED: "the service rejected the API token",
}


class CliError(Exception):
    """A message for the user (no traceback) and the process exit code."""

    def __init__(self, message: str, exit_code: int = CliExit.FAILED) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


def _print_error(message: str) -> None:
    # A console made here, not at import: its width follows the environment the command runs in (COLUMNS
    # under typer's CliRunner, a terminal resized since import), not the one the module was imported in.
    Console(stderr=True).print(f"[red]error:[/] {escape(message)}", highlight=False)


def handles_errors[**P, R](command: Callable[P, R]) -> Callable[P, R]:
    """Turn a CliError into its message on stderr and the exit code (typer.Exit works the same
    under the real entry point and under CliRunner)."""

    @functools.wraps(command)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return command(*args, **kwargs)
        except CliError as e:
            _print_error(e.message)
            raise typer.Exit(e.exit_code) from None
        except SettingsInvalid as e:  # read deep inside a command (the launcher's settings at app start)
            _print_error(str(e))
            raise typer.Exit(CliExit.BAD_INPUT) from None

    return wrapper


@dataclass(frozen=True)
class ClientConfig:
    url: str
    token: str | None
    config_file: Path | None


def config_candidates() -> list[Path]:
    """Where a config file may be: the user's, then the one `rljob serve` writes by default."""
    return [Path.home() / ".config" / "rljob" / "config.yaml", Path.home() / ".rljob" / "client.yaml"]


def load_client_config(url: str | None, token: str | None, config: Path | None) -> ClientConfig:
    """Flags win, then the environment (RLJOB_URL, RLJOB_TOKEN; Typer maps them onto the flags),
    then the config file (--config, RLJOB_CONFIG, or the first existing candidate)."""
    path = config or (Path(os.environ["RLJOB_CONFIG"]) if os.environ.get("RLJOB_CONFIG") else None)
    if path is None:
        path = next((p for p in config_candidates() if p.is_file()), None)
    data: dict[str, Any] = {}
    if path is not None:
        try:
            loaded = yaml.safe_load(path.read_text()) or {}
        except (OSError, yaml.YAMLError) as e:
            raise CliError(f"cannot read the config file {path}: {e}", CliExit.BAD_INPUT) from e
        if not isinstance(loaded, dict):
            raise CliError(f"the config file {path} must be a mapping with url and token", CliExit.BAD_INPUT)
        data = loaded
    return ClientConfig(url=(url or data.get("url") or DEFAULT_URL).rstrip("/"), token=token or data.get("token"), config_file=path)


# What `submit --dry-run` calls to print Kubernetes manifests: (spec, job id or None, what to name in errors) -> YAML.
ManifestRenderer = Callable[["JobSpec", str | None, str], str]
# What `tensorboard --sync` calls to copy event files: (run directory, logdir, local directory) -> names copied.
EventFileSyncer = Callable[[str, str, Path], list[str]]


@dataclass(frozen=True)
class CliContext:
    """What the global options give every command: where the service is, the local manifest renderer and the
    TensorBoard event file copier (operator code, handed in by main.py so the job commands import no adapter)."""

    url: str | None
    token: str | None
    config: Path | None
    render_manifests: ManifestRenderer
    sync_event_files: EventFileSyncer
    timeout_s: float = 30.0

    def client(self) -> RljobClient:
        return RljobClient(load_client_config(self.url, self.token, self.config), timeout_s=self.timeout_s)


def _field_problems(detail: Any) -> str:
    if not isinstance(detail, list):
        return str(detail)
    lines = []
    for item in detail:
        loc = [str(p) for p in item.get("loc", []) if p not in ("body", "query", "header", "path")]
        lines.append(f"  {'.'.join(loc) or '(request)'}: {item.get('msg', '')}")
    return "\n".join(lines)


def _budget_refusal(detail: Any) -> str | None:
    """The message of a submission its team's budget refused (loc body.budget.<name>), else None."""
    if isinstance(detail, list) and len(detail) == 1 and isinstance(detail[0], dict):
        loc = detail[0].get("loc")
        if isinstance(loc, list) and loc[:2] == ["body", "budget"]:
            return str(detail[0].get("msg", ""))
    return None


# A stream's read has no timeout of its own while it waits for news (a quiet log), so TCP keepalive finds a
# peer that is gone (a service machine that died without closing the connection) within about a minute.
KEEPALIVE_SOCKET_OPTIONS = [(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)] + [
    (socket.IPPROTO_TCP, option, value)
    for name, value in (("TCP_KEEPIDLE", 30), ("TCP_KEEPINTVL", 10), ("TCP_KEEPCNT", 3))
    if (option := getattr(socket, name, None)) is not None
]
DEFAULT_TIMEOUT_S = 30.0  # --timeout / RLJOB_TIMEOUT_S: connect, and each read of a plain request
# Event streams carry a keepalive every 15 s (service/api/sse.py): at the default, a silence of four is a dead stream,
# which reconnects with Last-Event-ID. A log without follow is answered within the service's request deadline
# (RLJOB_REQUEST_DEADLINE_S, 60 s): three of the default timeout wait for it whole.
SSE_READ_FACTOR, LOG_READ_FACTOR = 2.0, 3.0
SSE_MIN_READ_S = 20.0  # above the keepalive interval whatever --timeout says, or a quiet stream would reconnect


class RljobClient:
    def __init__(
        self,
        config: ClientConfig,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.config = config
        self.timeout_s = timeout_s
        self._sleep = sleep
        try:
            self.address = ServiceAddress.parse(config.url)
        except ValueError as e:
            raise CliError(f"bad service URL (--url, RLJOB_URL or the config file): {e}", CliExit.BAD_INPUT) from None
        headers = {"Authorization": f"Bearer {config.token}"} if config.token else {}
        if transport is None and self.address.socket is not None:
            if (problem := self.address.owner_problem()) is not None:
                raise CliError(problem, CliExit.UNREACHABLE)
            transport = httpx.HTTPTransport(uds=str(self.address.socket))  # every request, streams too, goes through it
        transport = transport or httpx.HTTPTransport(socket_options=KEEPALIVE_SOCKET_OPTIONS)
        self._http = httpx.Client(base_url=self.address.base_url, headers=headers, timeout=timeout_s, transport=transport)

    def close(self) -> None:
        self._http.close()

    def _unreachable(self, e: Exception) -> CliError:
        if isinstance(e, httpx.TimeoutException) and not isinstance(e, httpx.ConnectTimeout):
            return CliError(
                f"the rljob service at {self.config.url} did not answer in time ({e.__class__.__name__}, --timeout "
                f"{self.timeout_s:g} s): it may be overloaded or stuck; retry, or raise --timeout (RLJOB_TIMEOUT_S)",
                CliExit.UNREACHABLE,
            )
        problem = self.address.connect_problem(e) if isinstance(e, httpx.ConnectError) else None
        if problem is not None:
            return CliError(problem, CliExit.UNREACHABLE)
        return CliError(
            f"cannot reach the rljob service at {self.config.url} ({e.__class__.__name__}). "
            "Is `rljob serve` running? Point the CLI elsewhere with --url or RLJOB_URL.",
            CliExit.UNREACHABLE,
        )

    def check(self, response: httpx.Response) -> httpx.Response:
        if response.is_success:
            return response
        try:
            detail = response.json().get("detail", response.text)
        except ValueError:
            detail = response.text
        code = response.status_code
        if code == 401:
            raise CliError(
                f"the service rejected the token ({detail}). Set RLJOB_TOKEN or --token; `rljob serve` prints one.",
                CliExit.TOKEN_REJECTED,
            )
        if code == 422:
            refusal = _budget_refusal(detail)
            if refusal is not None:  # not bad input: the request was fine, the team's budget has no room for it
                raise CliError(f"refused by its team's budget: {refusal}", CliExit.FAILED)
            raise CliError(f"the service rejected the request:\n{_field_problems(detail)}", CliExit.BAD_INPUT)
        if code == 413:
            raise CliError("the request is too large for the service", CliExit.BAD_INPUT)
        raise CliError(f"{detail} (HTTP {code})", CliExit.FAILED)

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TransportError as e:
            raise self._unreachable(e) from e
        self.check(response)
        return response.json() if response.headers.get("content-type", "").startswith("application/json") else response.text

    # The API, one method a route, each answer read into its model.

    def submit(self, body: dict[str, Any], idempotency_key: str, *, override_budget: bool = False) -> JobPublic:
        params = {"override_budget": "true"} if override_budget else None
        return read_answer(
            JobPublic, self.request("POST", "/v1/jobs", json=body, headers={"Idempotency-Key": idempotency_key}, params=params)
        )

    def job(self, job_id: str) -> JobPublic:
        return read_answer(JobPublic, self.request("GET", f"/v1/jobs/{job_id}"))

    def stored_spec(self, job_id: str) -> dict[str, Any]:
        """The job's spec as the service answers it, every field kept, those this CLI does not know too: what a
        resubmission sends back (JobPublic.spec, read leniently, would drop a newer service's fields)."""
        spec: dict[str, Any] = self.request("GET", f"/v1/jobs/{job_id}")["spec"]
        return spec

    def estimate(self, body: dict[str, Any]) -> JobEstimate:
        """POST /v1/jobs?dry_run=estimate: checked as a submit is, nothing created."""
        return read_answer(JobEstimate, self.request("POST", "/v1/jobs", json=body, params={"dry_run": "estimate"}))

    def jobs(self, params: dict[str, Any]) -> JobsPublic:
        return read_answer(JobsPublic, self.request("GET", "/v1/jobs", params=params))

    def cancel(self, job_id: str) -> JobPublic:
        return read_answer(JobPublic, self.request("POST", f"/v1/jobs/{job_id}/cancel"))

    def metrics(self, job_id: str, *, limit: int) -> MetricsPublic:
        return read_answer(MetricsPublic, self.request("GET", f"/v1/jobs/{job_id}/metrics", params={"limit": limit}))

    def samples(self, job_id: str, step: int | None = None) -> SamplesPublic:
        """A 404 (no samples yet, none at `step`) is the service's message as a CliError."""
        return read_answer(SamplesPublic, self.request("GET", f"/v1/jobs/{job_id}/samples", params=_step(step)))

    def samples_or_none(self, job_id: str, step: int | None = None) -> SamplesPublic | None:
        body = self.get_or_none(f"/v1/jobs/{job_id}/samples", params=_step(step))
        return None if body is None else read_answer(SamplesPublic, body)

    def repro(self, job_id: str) -> ReproRecord | None:
        """None: the job's trainer has not written its reproducibility record (yet)."""
        body = self.get_or_none(f"/v1/jobs/{job_id}/repro")
        return None if body is None else read_answer(ReproRecord, body)

    def log_tail(self, job_id: str, lines: int) -> str:
        return str(self.request("GET", f"/v1/jobs/{job_id}/logs", params={"tail_lines": lines}))

    def usage(self, params: dict[str, Any]) -> UsagePublic:
        return read_answer(UsagePublic, self.request("GET", "/v1/usage", params=params))

    def webhook_deliveries(self, params: dict[str, Any]) -> WebhookDeliveriesPublic:
        return read_answer(WebhookDeliveriesPublic, self.request("GET", "/v1/webhooks/deliveries", params=params))

    def diff(self, a: str, b: str) -> JobDiff:
        return read_answer(JobDiff, self.request("GET", "/v1/jobs/diff", params={"a": a, "b": b}))

    def submit_eval(self, body: dict[str, Any], idempotency_key: str) -> EvalPublic:
        return read_answer(EvalPublic, self.request("POST", "/v1/evals", json=body, headers={"Idempotency-Key": idempotency_key}))

    def eval(self, eval_id: str) -> EvalPublic:
        return read_answer(EvalPublic, self.request("GET", f"/v1/evals/{eval_id}"))

    def eval_compare(self, a: str, b: str, function: str | None = None) -> EvalComparisonPublic:
        params = {"baseline": b, **({"function": function} if function else {})}
        return read_answer(EvalComparisonPublic, self.request("GET", f"/v1/evals/{a}/compare", params=params))

    def get_or_none(self, path: str, **kwargs: Any) -> Any:
        """GET `path`, None when the service answers 404 (a part it has not, or not yet: samples, a repro record)."""
        try:
            response = self._http.request("GET", path, **kwargs)
        except httpx.TransportError as e:
            raise self._unreachable(e) from e
        if response.status_code == 404:
            return None
        return self.check(response).json()

    def stream_lines(self, path: str, params: dict[str, Any] | None = None, *, follow: bool = False) -> Iterator[str]:
        """The response's lines; with `follow` the read waits for new lines as long as the connection lives."""
        timeout = httpx.Timeout(self.timeout_s, read=None if follow else self.timeout_s * LOG_READ_FACTOR)
        try:
            with self._http.stream("GET", path, params=params, timeout=timeout) as response:
                if not response.is_success:
                    response.read()
                    self.check(response)
                yield from response.iter_lines()
        except httpx.TransportError as e:
            raise self._unreachable(e) from e

    def sse(self, path: str, *, last_event_id: int | None = None, retries: int = 5) -> Iterator[tuple[str, int | None, str]]:
        """Yield (event, id, data) until the server ends the stream; reconnect with Last-Event-ID
        after a dropped connection (at most `retries` times in a row). `id` is the stream's last
        event id so far (SSE keeps it across events), None before the first."""
        failures = 0
        while True:
            headers = {"Last-Event-ID": str(last_event_id)} if last_event_id is not None else {}
            try:
                with connect_sse(
                    self._http,
                    "GET",
                    path,
                    headers=headers,
                    timeout=httpx.Timeout(self.timeout_s, read=max(SSE_MIN_READ_S, self.timeout_s * SSE_READ_FACTOR)),
                ) as source:
                    if not source.response.is_success:
                        source.response.read()
                        self.check(source.response)
                    for event in source.iter_sse():
                        if event.id.isdigit():
                            last_event_id = int(event.id)
                        if not event.data:
                            continue  # an id- or retry-only block: nothing to show
                        failures = 0
                        yield event.event, last_event_id, event.data
                    return  # the server ended the stream on purpose
            except SSEError as e:
                raise CliError(f"{self.config.url}{path} did not answer with an event stream ({e})") from e
            except httpx.TransportError as e:
                failures += 1
                if failures > retries:
                    raise self._unreachable(e) from e
                self._sleep(min(2.0 * failures, 10.0))


def _step(step: int | None) -> dict[str, int]:
    return {"step": step} if step is not None else {}
