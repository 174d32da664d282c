"""Operator commands (not the HTTP client side): `serve` (the embedded default), `token create|revoke|list` (straight to the
database: whoever can reach it is an admin), `render` (Kubernetes manifests) and `demo`."""

from __future__ import annotations

import ctypes
import dataclasses
import logging
import os
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Annotated, Any

import typer
import yaml

from service.config import LauncherName, Settings, load_settings
from service.domain.records.errors import InvalidRequest
from service.domain.records.models import TokenRecord
from service.settings_env import SettingsInvalid
from service.unix_socket import SOCKET_MODE, BoundUnixSocket, UnixSocketRefused, bind_unix_socket
from trainer.contract.spec.file import SpecFileError, load_spec_file

from .client import CliError, CliExit, handles_errors
from .manifests import render_k8s_manifests
from .output import OutputOption, console, emit
from .service_address import unix_url

if TYPE_CHECKING:
    import uvicorn

    from service.adapters.store import SqlJobStore
    from service.domain.tokens import TokenService

token_app = typer.Typer(help="Create, revoke and list API tokens (talks to the database directly).", no_args_is_help=True)


def _env(setting: str) -> str:
    """The variable Settings reads `setting` from, so a flag and its variable can never disagree."""
    if setting not in Settings.model_fields:
        raise ValueError(f"Settings has no field {setting!r}")
    return f"{Settings.model_config['env_prefix']}{setting.upper()}"


StateDir = Annotated[Path | None, typer.Option(envvar=_env("state_dir"), help="state directory (default ~/.rljob)")]
DatabaseUrl = Annotated[str | None, typer.Option(envvar=_env("database_url"), help="database URL (default SQLite in the state dir)")]


def _settings(**overrides: object) -> Settings:
    try:
        return load_settings(**{k: v for k, v in overrides.items() if v is not None})
    except SettingsInvalid as e:
        raise CliError(str(e), CliExit.BAD_INPUT) from None


def _token_service(  # imports kept lazy: the store pulls in SQLAlchemy
    state_dir: Path | None, database_url: str | None
) -> tuple[TokenService, SqlJobStore]:
    from service.adapters.store import SqlJobStore
    from service.domain.tokens import TokenService

    settings = _settings(state_dir=state_dir, database_url=database_url)
    store = SqlJobStore(settings.effective_database_url)
    store.migrate()
    return TokenService(store), store


def _stdout_is_terminal() -> bool:
    return sys.stdout.isatty()


def write_client_config(path: Path, url: str, token: str) -> None:
    """The file the CLI reads when no flag or env says otherwise; private, since it holds a token."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        yaml.safe_dump({"url": url, "token": token}, f)


def _existing_token(path: Path) -> str | None:
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError):
        return None
    token = data.get("token") if isinstance(data, dict) else None
    return token if isinstance(token, str) and len(token) >= 32 else None


@handles_errors
def serve(
    host: Annotated[str | None, typer.Option(envvar=_env("host"), help="listen address (default 127.0.0.1)")] = None,
    port: Annotated[int | None, typer.Option(envvar=_env("port"), help="port (default 8765)")] = None,
    uds: Annotated[
        Path | None,
        typer.Option(
            envvar=_env("uds"),
            help="listen on this Unix socket instead of host:port, opening no TCP socket; made 0600 (only this user may "
            "connect; requests still need a token); clients use --url unix:PATH",
        ),
    ] = None,
    state_dir: StateDir = None,
    database_url: DatabaseUrl = None,
    launcher: Annotated[LauncherName | None, typer.Option(envvar=_env("launcher"), help="default local")] = None,
    max_concurrent_jobs: Annotated[
        int | None, typer.Option(envvar=_env("max_concurrent_jobs"), help="local launcher: jobs at once (default 2)")
    ] = None,
) -> None:
    """Run the control service: SQLite, the local launcher and local artifacts unless configured."""
    import uvicorn

    from service.adapters.launchers import check_launcher_settings
    from service.app import create_app
    from service.connection_limits import ConnectionLimits, bounded_protocol
    from service.domain.tokens import generate_token
    from service.logging_config import configure_logging

    # Not dumpable: this process's environment and memory hold the database URL and every token, and the local
    # launcher's jobs, reward workers included, run as this user (trainer/rewards_sandbox/process_privacy.py says
    # why; the service imports nothing of the trainer's but its contract, so the call is made here).
    prctl = getattr(ctypes.CDLL(None), "prctl", None)  # Linux only
    if prctl is not None:
        prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0
    if uds is not None and (host is not None or port is not None):
        raise CliError(
            "--uds (RLJOB_UDS) listens on a Unix socket and opens no TCP socket, so --host and --port (RLJOB_HOST, "
            "RLJOB_PORT) cannot be given with it: drop one or the other",
            CliExit.BAD_INPUT,
        )
    base = _settings(
        host=host,
        port=port,
        uds=uds,
        state_dir=state_dir,
        database_url=database_url,
        launcher=launcher,
        max_concurrent_jobs=max_concurrent_jobs,
    )
    client_file = Path(base.state_dir).expanduser() / "client.yaml"
    token = (base.bootstrap_token.get_secret_value() if base.bootstrap_token else None) or _existing_token(client_file)
    token = token or generate_token()
    settings = _settings(**{**base.model_dump(), "bootstrap_token": token})
    check_launcher_settings(settings)  # SettingsInvalid: handles_errors prints it, nothing has started
    # Bound first, before any thread exists (it sets the process's umask), and before the client file names it.
    bound = _bind(settings.uds) if settings.uds is not None else None
    try:
        url = unix_url(bound.path) if bound else f"http://{settings.host}:{settings.port}"
        write_client_config(client_file, url, token)
        console.print(f"rljob service on [bold]{url}[/] (state in {Path(settings.state_dir).expanduser()})")
        if bound:
            console.print(
                f"the socket is {SOCKET_MODE:04o}: only this user may connect, and each request still needs a token. A browser "
                f"cannot open it: forward a port to it (ssh -L 8765:{bound.path} HOST) and open http://127.0.0.1:8765/ui/"
            )
        else:
            console.print(f"dashboard: [bold]{url}/ui/[/] (sign in with the token below)")
        if _stdout_is_terminal():
            console.print(f"local API token for team [bold]{settings.bootstrap_team}[/]: [bold]{token}[/]")
            console.print(f"  export RLJOB_URL={url} RLJOB_TOKEN={token}   (also written to {client_file})")
        else:  # stdout kept in a file is a log, and a token in a log is a leaked token
            console.print(
                f"local API token for team {settings.bootstrap_team}: in {client_file} (mode 0600), not printed since "
                f"stdout is not a terminal\n  export RLJOB_URL={url} RLJOB_TOKEN=<the token in {client_file}>"
            )
        # before the app exists: its start-up (recovery) logs at INFO
        configure_logging(secrets=[token], access_log_reads_per_s=settings.access_log_reads_per_s)
        # log_config=None: uvicorn's own dictConfig would give its loggers a second, unstructured format.
        # timeout_graceful_shutdown: after SIGTERM, requests still running past the grace are cancelled (the
        # default waits for them forever); event streams end at once (api/termination.py).
        # http: idle connections closed, open ones capped below the descriptor limit, those without a valid token capped
        # below that (service/connection_limits.py).
        options: dict[str, Any] = {
            "log_level": "info",
            "log_config": None,
            "timeout_graceful_shutdown": max(1, round(settings.shutdown_grace_s)),
            "http": bounded_protocol(ConnectionLimits.from_settings(settings)),
        }
        if bound is None:
            uvicorn.run(create_app(settings), host=settings.host, port=settings.port, **options)
        else:
            _serve_on_unix_socket(uvicorn.Config(create_app(settings), **options), bound)
    finally:
        if bound:
            bound.close()


def _bind(path: Path) -> BoundUnixSocket:
    try:
        return bind_unix_socket(path)
    except UnixSocketRefused as e:
        raise CliError(str(e), CliExit.BAD_INPUT) from None


def _exit_on_sigterm(sig: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + sig)


def _serve_on_unix_socket(config: uvicorn.Config, bound: BoundUnixSocket) -> None:
    """What uvicorn.run does, on the socket bound by service/unix_socket.py (uvicorn's own `uds=` would chmod it 0666)."""
    import uvicorn
    from uvicorn.config import STARTUP_FAILURE

    logging.getLogger(__name__).info("listening on the Unix socket %s (mode %04o)", bound.path, SOCKET_MODE)
    server = uvicorn.Server(config)
    # uvicorn raises the SIGTERM it caught again once it has shut down; by default that would end the process before
    # serve's `finally` removes the socket.
    previous = signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        server.run(sockets=[bound.sock])
    except KeyboardInterrupt:
        pass  # Ctrl-C: uvicorn has shut down already, as uvicorn.run ends
    finally:
        signal.signal(signal.SIGTERM, previous)
    if not server.started:
        raise SystemExit(STARTUP_FAILURE)


@token_app.command("create")
@handles_errors
def token_create(
    team: Annotated[str, typer.Option(help="the team whose jobs this token sees")],
    name: Annotated[str, typer.Option(help="who or what uses it; jobs it submits show it as submitted_by")] = "",
    admin: Annotated[bool, typer.Option(help="may see every team's jobs")] = False,
    state_dir: StateDir = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Create a token; it is shown once and stored only as a hash."""
    tokens, store = _token_service(state_dir, database_url)
    try:
        secret, record = tokens.create(team, name=name, admin=admin)
    except InvalidRequest as e:
        raise CliError(str(e), CliExit.BAD_INPUT) from e
    finally:
        store.close()
    console.print(f"token {record.id} for team {record.team}{' (admin)' if admin else ''}:")
    typer.echo(secret)


@token_app.command("revoke")
@handles_errors
def token_revoke(token_id: str, state_dir: StateDir = None, database_url: DatabaseUrl = None) -> None:
    """Revoke a token by its id (tok_...); requests with it get 401 from now on."""
    tokens, store = _token_service(state_dir, database_url)
    try:
        if not tokens.revoke(token_id):
            raise CliError(f"no active token {token_id}", CliExit.FAILED)
    finally:
        store.close()
    console.print(f"revoked {token_id}")


@token_app.command("list")
@handles_errors
def token_list(state_dir: StateDir = None, database_url: DatabaseUrl = None, output: OutputOption = None) -> None:
    """List every token, revoked ones too (never the secret: only its hash is stored)."""
    tokens, store = _token_service(state_dir, database_url)
    try:
        records = tokens.list()
    finally:
        store.close()
    if output:
        emit([_token_object(r) for r in records], output, [r.id for r in records])
        return
    for record in records:
        state = f"revoked {record.revoked_at:%Y-%m-%d}" if record.revoked_at else "active"
        console.print(f"{record.id}  team={record.team}  admin={record.admin}  {state}  {record.name}")


def _token_object(record: TokenRecord) -> dict[str, Any]:
    """A TokenRecord as JSON-ready data, times in ISO 8601 as the API writes them."""
    return {k: v.isoformat() if hasattr(v, "isoformat") else v for k, v in dataclasses.asdict(record).items()}


@handles_errors
def render(
    spec: Annotated[Path, typer.Argument(help="job spec file")],
    job_id: Annotated[str | None, typer.Option(help="job id to name the objects (default: from the spec hash)")] = None,
) -> None:
    """Print the Kubernetes manifests the kubernetes launcher would create for this spec."""
    try:
        job_spec = load_spec_file(spec)
    except SpecFileError as e:
        lines = "\n".join(f"  {field}: {reason}" for field, reason in e.problems)
        raise CliError(f"invalid job spec {spec}:\n{lines}", CliExit.BAD_INPUT) from e
    typer.echo(render_k8s_manifests(job_spec, job_id, str(spec)), nl=False)


@handles_errors
def demo(
    spec: Annotated[Path, typer.Option(help="the job to run")] = Path("examples/tiny-cpu.yaml"),
    work_dir: Annotated[Path, typer.Option(help="tiny model, runs and service state go here")] = Path("var/demo"),
) -> None:
    """Start the service, build the tiny model, run the tiny CPU job over REST to SUCCEEDED."""
    from .demo import run_demo

    raise typer.Exit(run_demo(spec, work_dir, console))
