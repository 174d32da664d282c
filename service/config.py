"""Service settings (env prefix RLJOB_), built by `load_settings()` and passed in; never a global.

Outside `environment=dev` the settings refuse what is only safe on a laptop: SQLite (one file on
one machine, no backups) and a bootstrap admin token. A bootstrap token shorter than 32 characters
is refused everywhere, because it would be guessable.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from service.domain.cost.storage_usage import DEFAULT_STORAGE_PRICE_USD_PER_GIB_MONTH
from service.domain.cost.usage import DEFAULT_PRICES_USD_PER_CHIP_HOUR, CapacityType
from service.domain.health.learning_health import HealthPolicy
from service.domain.location_policy import TEAM_PLACEHOLDER, LocationPolicy, parse_place
from service.domain.records.budget_models import TeamBudget
from service.domain.records.train_step_summary import HEALTH_WINDOW_STEPS
from service.domain.webhooks.webhook_models import MAX_ENDPOINTS_PER_TEAM, WebhookEndpointConfig
from service.settings_env import read_settings
from trainer.contract.accelerators.tpu import CPU_ACCELERATOR, TPU_SLICES
from trainer.contract.spec.dns_label import is_dns_label
from trainer.contract.spec.values import MAX_RETENTION_DAYS

MIN_BOOTSTRAP_TOKEN_CHARS = 32
LauncherName = Literal["local", "kubernetes"]
TPU_FAMILIES = sorted({tpu.generation for tpu in TPU_SLICES.values()})


def default_state_dir() -> Path:
    return Path.home() / ".rljob"


class TeamQuota(BaseModel):
    """One team's own limits on the local launcher; a key left out (or null) takes RLJOB_TEAM_MAX_JOBS
    or RLJOB_TEAM_MAX_CHIPS."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_jobs: int | None = Field(default=None, ge=1, description="jobs the team runs at once")
    max_chips: int | None = Field(default=None, ge=0, description="TPU chips the team's running jobs hold at once")


# The longest interval, grace or timeout a setting may name: beyond it a loop's wait is no longer a wait (inf or
# 1e12 made `Event.wait` raise OverflowError in the launcher's thread, which then stopped without a word).
MAX_SECONDS = 86_400.0


class Settings(BaseSettings):
    # allow_inf_nan=False: `inf` and `nan` are refused with the setting's name, like any other bad value.
    model_config = SettingsConfigDict(env_prefix="RLJOB_", extra="ignore", frozen=True, allow_inf_nan=False)

    environment: Literal["dev", "prod"] = Field(default="dev", description="prod refuses SQLite and a bootstrap admin token")
    state_dir: Path = Field(default_factory=default_state_dir, description="SQLite file, local job dirs, logs")
    database_url: str = Field(default="", description="empty: SQLite, rljob.db in the state directory")
    launcher: LauncherName = Field(default="local", description="run jobs as local processes or Kubernetes Jobs")
    trainer_command: list[str] = Field(
        default_factory=lambda: [sys.executable, "-m", "trainer"],
        description="how the local launcher runs the trainer; `run --spec F --job-id ID` is appended",
    )
    max_concurrent_jobs: int = Field(default=2, ge=1, le=64, description="local launcher: jobs running at once (the rest wait)")
    team_max_jobs: int | None = Field(
        default=None, ge=1, description="local launcher: jobs one team runs at once (unset: only the machine's limit)"
    )
    team_max_chips: int | None = Field(
        default=None, ge=0, description="local launcher: TPU chips one team's running jobs hold (a cpu job holds none)"
    )
    team_quotas: Annotated[dict[str, TeamQuota], NoDecode] = Field(
        default_factory=dict,
        description='local launcher: per-team limits over the two above, as JSON: {"team-a": {"max_jobs": 2, "max_chips": 8}}; '
        "a key left out takes the default",
    )
    host_tpu: str | None = Field(
        default=None,
        description="local launcher: the TPU slice this machine runs (one VM's, e.g. v5e-1), or cpu for none, instead of "
        "what it finds (its /dev TPU devices and TPU_ACCELERATOR_TYPE or the GCE metadata); for a machine whose chips "
        "cannot be counted",
    )
    max_resumes: int = Field(default=3, ge=0, description="relaunches of a job whose workload was lost")
    max_hung_restarts: int = Field(
        default=2,
        ge=0,
        le=100,
        description="restarts from the last checkpoint of a job whose trainer found itself hung (exit 79); one more hang "
        "fails it with reason HUNG",
    )
    cancel_grace_s: float = Field(default=10.0, gt=0, le=MAX_SECONDS, description="local launcher: SIGTERM to SIGKILL on cancel")
    local_poll_interval_s: float = Field(default=0.2, gt=0, le=MAX_SECONDS, description="local launcher: how often it checks its processes")
    progress_poll_interval_s: float = Field(default=0.5, gt=0, le=MAX_SECONDS, description="how often active jobs' trainer events are read")
    progress_fold_cpu_share: float = Field(
        default=0.25,
        gt=0,
        le=1,
        description="the most of one core that folding trainer events may take while a job's events are behind "
        "(the rest answers requests: one job writing events flat out cannot slow another team's)",
    )
    leader_check_interval_s: float = Field(
        default=2.0,
        gt=0,
        le=MAX_SECONDS,
        description="PostgreSQL replicas: how often one that does not lead tries to, and the leader checks it still does",
    )
    active_jobs_reconcile_interval_s: float = Field(
        default=30.0, gt=0, le=MAX_SECONDS, description="how often the service asks the launcher about every job that has not ended"
    )
    # Kubernetes labels/annotations: a phase or stage change goes at once, progress this often.
    status_mirror_every_steps: int = Field(default=10, ge=1, description="mirror progress every N train steps")
    status_mirror_interval_s: float = Field(
        default=30.0, gt=0, le=MAX_SECONDS, description="... or after this many seconds, whichever comes first"
    )
    # Learning health (service/domain/health/learning_health.py): when a job is diverging, without signal or stalled.
    health_kl_max: float = Field(default=1.0, gt=0, description="KL to the reference above this is divergence")
    health_no_signal_steps: int = Field(
        default=3, ge=1, le=HEALTH_WINDOW_STEPS, description="consecutive steps with no prompt carrying signal -> no-signal"
    )
    health_stall_floor_s: float = Field(default=300.0, gt=0, le=MAX_SECONDS, description="never stalled sooner after the last step")
    health_stall_step_intervals: float = Field(
        default=5.0, gt=1, description="stalled after this many median step intervals without a step (and the floor)"
    )
    sse_poll_interval_s: float = Field(
        default=1.0,
        gt=0,
        le=MAX_SECONDS,
        description="longest wait between reads of new events (one reader per process; a commit wakes it)",
    )
    sse_queue_events: int = Field(
        default=1000,
        ge=1,
        le=100_000,
        description="events held for a stream that has not taken them yet; one more ends it with a `reconnect` event",
    )
    max_event_streams: int = Field(default=2000, ge=1, description="event streams open at once; one more gets 503 with Retry-After")
    sse_max_duration_s: float = Field(default=3600.0, gt=0, le=MAX_SECONDS, description="a stream ends after this; clients resume")
    max_log_followers: int = Field(default=32, ge=1, le=1000, description="concurrent logs?follow=true streams")
    max_log_followers_per_team: int = Field(
        default=8, ge=1, le=1000, description="a team's share of RLJOB_MAX_LOG_FOLLOWERS; one more of that team's gets 429"
    )
    log_follow_max_bytes_per_s: int = Field(
        default=1024 * 1024,
        ge=4096,
        le=1 << 30,
        description="a log follow sends at most this many bytes a second (a trainer printing faster is read at this pace)",
    )
    log_follow_poll_interval_s: float = Field(default=0.5, gt=0, le=MAX_SECONDS, description="pause of an idle log follow")
    max_requests_in_flight: int = Field(
        default=64, ge=1, description="requests handled at once (probes, streams and log follows apart); one more gets 503"
    )
    max_requests_per_team: int = Field(
        default=16,
        ge=1,
        description="a team's share of RLJOB_MAX_REQUESTS_IN_FLIGHT (all its tokens together); one more "
        "of that team's gets 503 while other teams' still get in",
    )
    body_timeout_s: float = Field(
        default=30.0, gt=0, le=MAX_SECONDS, description="a request with a valid token must send its whole body within this (else 408)"
    )
    request_deadline_s: float = Field(
        default=60.0,
        gt=0,
        le=MAX_SECONDS,
        description="a request with a valid token (event streams and log follows apart) "
        "is answered within this: a 503 if nothing was sent yet, else the response is cut, and its place freed",
    )
    overload_retry_after_s: int = Field(default=1, ge=1, le=3600, description="the Retry-After of those 503s")
    access_log_reads_per_s: int = Field(
        default=20,
        ge=0,
        description="successful reads (GET, HEAD) the access log keeps a second; the next kept line counts those left "
        "out (reads_not_logged); writes and refusals are all kept; 0 keeps every read",
    )
    # Far below the CLI's 30 s timeout (RLJOB_TIMEOUT_S): a user must see the 503, not a timeout that leaves them unsure
    # whether the job was stored. A write normally has the database in milliseconds (service/domain/write_wait.py).
    request_write_wait_s: float = Field(
        default=5.0,
        gt=0,
        le=MAX_SECONDS,
        description="a request's write (submit, cancel) waits at most this for the database's write lock, then answers 503 "
        "with Retry-After having stored nothing; keep it below your clients' timeout (the CLI's is 30 s)",
    )
    max_event_streams_per_token: int = Field(
        default=100, ge=1, description="event streams one API token may hold at once (its share of RLJOB_MAX_EVENT_STREAMS)"
    )
    max_anonymous_requests: int = Field(
        default=16,
        ge=1,
        description="requests without a valid token (the dashboard's files, 401s) handled at once, apart "
        "from the authenticated ones; one more gets 503",
    )
    anonymous_body_timeout_s: float = Field(
        default=10.0, gt=0, le=MAX_SECONDS, description="a request without a valid token must send its whole body within this (else 408)"
    )
    shutdown_grace_s: float = Field(
        default=20.0,
        gt=0,
        le=MAX_SECONDS,
        description="`rljob serve`: after SIGTERM, how long requests may finish before they are cancelled",
    )
    max_body_bytes: int = Field(default=256 * 1024, gt=0, description="larger request bodies get 413")
    max_connections: int = Field(
        default=1000,
        ge=1,
        le=1_000_000,
        description="connections open at once, lowered to the descriptor limit less 128; "
        "one more gets 503 and is closed, and the service log says so (service/connection_limits.py)",
    )
    request_header_timeout_s: float = Field(
        default=10.0,
        gt=0,
        le=MAX_SECONDS,
        description="a connection that sends no request's headers within this (after it opens, or after its last response) is closed",
    )
    # Far above what browsers loading the dashboard need (6 connections each), far below RLJOB_MAX_CONNECTIONS: one
    # client re-opening idle connections once kept every team at 503 (service/unauthenticated_connections.py).
    max_unauthenticated_connections: int = Field(
        default=256,
        ge=1,
        le=1_000_000,
        description="connections open at once on which no request has passed the token check yet, at most half of "
        "RLJOB_MAX_CONNECTIONS; one more closes the oldest idle one, or gets 503 when none is idle",
    )
    # Half the total: one address cannot take every unauthenticated slot, yet one client opening many connections at
    # once (100 event streams; everyone through `kubectl port-forward`, which arrives from the pod's loopback) is not cut
    # while its requests are still on their way. At 32, a fresh-clone CI run's 100 parallel streams lost 68.
    max_unauthenticated_connections_per_peer: int = Field(
        default=128,
        ge=1,
        le=1_000_000,
        description="the same from one address (an IPv6 /64): one more closes that address's oldest idle one, or gets "
        "503; behind a proxy that connects from one address, raise it to RLJOB_MAX_UNAUTHENTICATED_CONNECTIONS",
    )
    token_cache_size: int = Field(default=1024, ge=0, le=1_000_000, description="API tokens remembered per process (0: none)")
    token_cache_ttl_s: float = Field(
        default=5.0, ge=0, le=300, description="how long a remembered token is trusted; a revocation elsewhere waits this"
    )
    bootstrap_token: SecretStr | None = Field(default=None, description="ensure this token exists at start-up")
    bootstrap_team: str = Field(default="local", description="the bootstrap token's team")
    bootstrap_admin: bool = Field(default=False, description="the bootstrap token sees every team (dev only)")
    # Team isolation (service/domain/location_policy.py): off while both are empty; once either is set,
    # every location in a spec must lie under one of its team's prefixes.
    team_locations: dict[str, list[str]] = Field(
        default_factory=dict,
        description="team -> the gs:// prefixes, local directory roots and Hugging Face Hub owners (hf://OWNER/) its "
        'jobs may read, write and upload to, e.g. {"team-a": ["gs://rljob-runs/team-a/", "/data/team-a", "hf://team-a-org/"]}',
    )
    team_location_template: str = Field(
        default="", description="the one prefix of a team not in RLJOB_TEAM_LOCATIONS, e.g. gs://rljob-runs/{team}/"
    )
    usage_prices_usd_per_chip_hour: dict[str, dict[CapacityType, float]] = Field(
        default_factory=lambda: {family: dict(prices) for family, prices in DEFAULT_PRICES_USD_PER_CHIP_HOUR.items()},
        description="USD per TPU chip-hour by family and capacity, for job cost (docs/usage.md); "
        "JSON, replaces the whole table; a missing price shows cost null",
    )
    usage_storage_price_usd_per_gib_month: float = Field(
        default=DEFAULT_STORAGE_PRICE_USD_PER_GIB_MONTH,
        ge=0,
        allow_inf_nan=False,
        description="USD per GiB-month of run-directory storage, for `rljob usage` (docs/usage.md); "
        "default: Cloud Storage Standard in one region (us-central1, us-east5), https://cloud.google.com/storage/pricing; "
        "list prices move: set your own",
    )
    # 30 days: long enough to compare, evaluate and fork from a run's intermediate checkpoints (attached evals take
    # hours), short enough that a checkpoint-heavy run stops paying for them after one month; Standard storage has no
    # minimum storage duration, so an earlier delete costs nothing extra.
    checkpoint_retention_days: int = Field(
        default=30,
        ge=0,
        le=MAX_RETENTION_DAYS,
        description="days after a job ends that its intermediate actor checkpoints are deleted by the leader (the final, "
        "exported and best are kept; docs/usage.md, checkpoint retention); 0: never; a job's spec.retention overrides it",
    )
    team_budgets: Annotated[dict[str, TeamBudget], NoDecode] = Field(
        default_factory=dict,
        description="per-team monthly budgets (calendar month, UTC) in billed TPU chip-hours and/or dollars at the list prices, as "
        'JSON: {"team-a": {"chip_hours": 500, "usd": 1000}}; a job whose estimate exceeds what is left is refused, and a '
        "team that reaches a budget has its TPU jobs stopped with a checkpoint until it has room (docs/usage.md, budgets)",
    )
    budget_check_interval_s: float = Field(
        default=30.0, gt=0, le=MAX_SECONDS, description="how often the leader recomputes each team's spend against its budget"
    )
    team_webhooks: Annotated[dict[str, list[WebhookEndpointConfig]], NoDecode] = Field(
        default_factory=dict,
        description="per-team HTTP(S) endpoints the leader notifies of job phase changes, learning-health verdict changes, hung attempts, "
        "eval results and budget holds, as JSON: "
        '{"team-a": [{"url_env": "TEAM_A_HOOK_URL", "secret_env": "TEAM_A_HOOK_SECRET", '
        '"events": ["job.phase", "eval.result"], "format": "rljob"}]}; url or url_env, secret or secret_env (the variable\'s '
        "name: keep the value in a Secret), format rljob (signed) or slack (docs/service.md, webhooks)",
    )
    webhook_timeout_s: float = Field(
        default=10.0,
        gt=0,
        le=300,
        description="a webhook attempt's read timeout; an attempt ends this plus its connect timeout (this or 5 s, the "
        "smaller) after it starts, however slowly the receiver trickles its answer",
    )
    webhook_max_attempts: int = Field(
        default=8, ge=1, le=30, description="attempts of a webhook delivery (retried with exponential backoff) before it is failed"
    )
    webhook_retry_base_s: float = Field(
        default=2.0, gt=0, le=MAX_SECONDS, description="the wait after a webhook's first failed attempt; doubled after each (to 300 s)"
    )
    mlflow_tracking_uri: str = Field(
        default="",
        description="empty: off; else the leader exports every running job to this MLflow tracking "
        "server (http(s)://) or database (sqlite:///, postgresql://) as it runs (docs/service.md); needs rljob[mlflow]",
    )
    mlflow_experiment: str = Field(
        default="rljob", min_length=1, max_length=500, description="the MLflow experiment of the live export, created when missing"
    )
    mlflow_export_interval_s: float = Field(
        default=15.0, gt=0, le=MAX_SECONDS, description="how often the live MLflow export logs new points"
    )
    host: str = Field(default="127.0.0.1", description="listen address of `rljob serve`")
    port: int = Field(default=8765, ge=0, le=65535, description="listen port of `rljob serve`")
    uds: Path | None = Field(
        default=None,
        description="`rljob serve` listens on this Unix socket instead (opening no TCP socket), made 0600: only the user "
        "who started the service may connect, and each request still needs a token; clients use the URL unix:PATH",
    )

    @field_validator("uds", mode="before")
    @classmethod
    def _uds(cls, v: object) -> object:
        return None if isinstance(v, str) and not v.strip() else v  # RLJOB_UDS= (empty): TCP, as unset

    @field_validator("host_tpu", mode="before")
    @classmethod
    def _host_tpu(cls, v: object) -> object:
        if v is None or (isinstance(v, str) and not v.strip()):
            return None  # RLJOB_HOST_TPU= (empty): probe the machine, as unset
        one_vm = [name for name, tpu in TPU_SLICES.items() if not tpu.multi_host]
        if v != CPU_ACCELERATOR and v not in one_vm:
            # The local launcher runs a job as one process on one machine: a multi-VM slice is never this machine's.
            raise ValueError(f"must be cpu or a slice of one VM: {', '.join(one_vm)} (Google's v5litepod-N is v5e-N)")
        return v

    @field_validator("trainer_command")
    @classmethod
    def _command(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("must name at least the program to run")
        return v

    @field_validator("team_locations")
    @classmethod
    def _team_locations(cls, v: dict[str, list[str]]) -> dict[str, list[str]]:
        for team, prefixes in v.items():
            if not is_dns_label(team):
                raise ValueError(f"{team!r} is not a team name (a DNS label: lowercase letters, digits, '-')")
            for prefix in prefixes:
                parse_place(prefix)  # ValueError: not gs://bucket[/prefix] or an absolute path, or has '..'
        return v

    @field_validator("team_location_template")
    @classmethod
    def _template(cls, v: str) -> str:
        if not v:
            return v
        # Without the placeholder every team would share one prefix: no isolation at all.
        if v.count(TEAM_PLACEHOLDER) != 1 or v.replace(TEAM_PLACEHOLDER, "").count("{"):
            raise ValueError(f"must contain {TEAM_PLACEHOLDER} exactly once and no other braces")
        parse_place(v.replace(TEAM_PLACEHOLDER, "team"))
        return v

    @field_validator("team_quotas", mode="before")
    @classmethod
    def _team_quotas_json(cls, v: object) -> object:
        if isinstance(v, str):  # from the environment: JSON, refused with a message rather than a traceback
            try:
                v = json.loads(v) if v.strip() else {}
            except ValueError as e:
                raise ValueError(f'is not JSON ({e}); write {{"team-a": {{"max_jobs": 2, "max_chips": 8}}}}') from None
        if not isinstance(v, dict):
            raise ValueError('must be a JSON object of team -> limits, e.g. {"team-a": {"max_jobs": 2}}')
        if any(not isinstance(team, str) or not team.strip() for team in v):
            raise ValueError("team names must not be empty")
        return v

    @field_validator("team_budgets", mode="before")
    @classmethod
    def _team_budgets_json(cls, v: object) -> object:
        return _team_map_json(v, '{"team-a": {"chip_hours": 500, "usd": 1000}}', "budget")

    @field_validator("team_webhooks", mode="before")
    @classmethod
    def _team_webhooks_json(cls, v: object) -> object:
        return _team_map_json(v, '{"team-a": [{"url_env": "HOOK_URL", "secret_env": "SECRET"}]}', "endpoints")

    @field_validator("team_webhooks")
    @classmethod
    def _team_webhook_names(cls, v: dict[str, list[WebhookEndpointConfig]]) -> dict[str, list[WebhookEndpointConfig]]:
        for team, endpoints in v.items():
            if len(endpoints) > MAX_ENDPOINTS_PER_TEAM:
                raise ValueError(f"team {team}: at most {MAX_ENDPOINTS_PER_TEAM} endpoints")
            names = [e.display_name() for e in endpoints]
            if len(set(names)) != len(names):
                raise ValueError(f"team {team}: two endpoints are both named {max(names, key=names.count)!r}: give each a distinct name")
        return v

    @field_validator("usage_prices_usd_per_chip_hour")
    @classmethod
    def _prices(cls, v: dict[str, dict[CapacityType, float]]) -> dict[str, dict[CapacityType, float]]:
        for family, prices in v.items():
            if family not in TPU_FAMILIES:
                raise ValueError(f"unknown TPU family {family!r}: price one of {', '.join(TPU_FAMILIES)}")
            for capacity, price in prices.items():
                if not math.isfinite(price) or price < 0:
                    raise ValueError(f"{family} {capacity}: a price is a finite number >= 0, not {price}")
        return v

    @model_validator(mode="after")
    def _refuse_unsafe_outside_dev(self) -> Settings:
        token = self.bootstrap_token.get_secret_value() if self.bootstrap_token else None
        if token is not None and len(token) < MIN_BOOTSTRAP_TOKEN_CHARS:
            raise ValueError(f"RLJOB_BOOTSTRAP_TOKEN must have at least {MIN_BOOTSTRAP_TOKEN_CHARS} characters")
        if self.environment == "dev":
            return self
        if not self.database_url.startswith(("postgresql", "postgres")):
            raise ValueError(
                "RLJOB_DATABASE_URL must point at PostgreSQL outside dev (SQLite is for the embedded default); "
                "set RLJOB_ENVIRONMENT=dev to run locally"
            )
        if self.bootstrap_admin:
            raise ValueError("RLJOB_BOOTSTRAP_ADMIN is for local use; create admin tokens with `rljob token create --admin`")
        return self

    @property
    def health_policy(self) -> HealthPolicy:
        return HealthPolicy(
            kl_max=self.health_kl_max,
            no_signal_steps=self.health_no_signal_steps,
            stall_floor_s=self.health_stall_floor_s,
            stall_step_intervals=self.health_stall_step_intervals,
        )

    @property
    def location_policy(self) -> LocationPolicy:
        return LocationPolicy(
            team_prefixes={team: tuple(prefixes) for team, prefixes in self.team_locations.items()},
            default_template=self.team_location_template,
        )

    @property
    def effective_database_url(self) -> str:
        return self.database_url or f"sqlite:///{Path(self.state_dir).expanduser().resolve() / 'rljob.db'}"


def load_settings(**overrides: object) -> Settings:
    """Settings from the environment (RLJOB_*), with explicit overrides (CLI flags, tests) on top;
    SettingsInvalid names each bad variable and the form it takes."""
    return read_settings(Settings, **overrides)


def _team_map_json(v: object, example: str, what: str) -> object:
    """A team -> value setting (budgets, webhooks) as JSON from the environment, or as given: refused with a
    message, not a traceback, unless it is an object keyed by team names (DNS labels)."""
    if isinstance(v, str):
        try:
            v = json.loads(v) if v.strip() else {}
        except ValueError as e:
            raise ValueError(f"is not JSON ({e}); write {example}") from None
    if not isinstance(v, dict):
        raise ValueError(f"must be a JSON object of team -> {what}, e.g. {example}")
    for team in v:
        if not isinstance(team, str) or not is_dns_label(team):
            raise ValueError(f"{team!r} is not a team name (a DNS label: lowercase letters, digits, '-')")
    return v
