"""Webhook endpoints (RLJOB_TEAM_WEBHOOKS, validated here), their deliveries, and the two ports the dispatcher uses.

An endpoint's URL and secret are secrets (a Slack incoming-webhook URL is a credential in its path): neither appears
in an API response or a log line. An admin names an environment variable holding each (`url_env`, `secret_env`,
filled from a Kubernetes Secret as the HF token is), or writes it inline (`url`, `secret`); deliveries show the
endpoint's `name` only.
"""

from __future__ import annotations

import enum
import os
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from service.domain.records.models import JobEvent

from .webhooks import WEBHOOK_EVENTS, WebhookFormat

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
ENDPOINT_NAME = re.compile(r"^[a-z0-9]([a-z0-9.-]{0,61}[a-z0-9])?$")
MAX_ENDPOINTS_PER_TEAM = 10  # each endpoint has a sender thread of its own


def url_problem(url: str) -> str | None:
    """Why `url` cannot be a webhook endpoint; None: it can. http(s) with a host, no credentials or fragment."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        return f"must be an http:// or https:// URL, not {parts.scheme or 'one without a scheme'}"
    if not parts.hostname:
        return "has no host"
    if parts.username is not None or parts.password is not None:
        return "must not carry credentials (user:password@): sign with a secret instead"
    if parts.fragment:
        return "must not have a #fragment"
    return None


class WebhookEndpointConfig(BaseModel):
    """One endpoint of a team, as an admin writes it in RLJOB_TEAM_WEBHOOKS."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str | None = Field(default=None, description="what deliveries show; default the URL's host, or url_env lowercased")
    url: SecretStr | None = Field(default=None, description="http(s) URL; or url_env")
    url_env: str | None = Field(default=None, description="an environment variable holding the URL (a Slack webhook URL is a secret)")
    secret: SecretStr | None = Field(default=None, description="the HMAC-SHA256 signing secret; prefer secret_env")
    secret_env: str | None = Field(default=None, description="an environment variable holding the signing secret")
    events: list[str] = Field(default_factory=lambda: list(WEBHOOK_EVENTS), min_length=1, description="which events it receives")
    format: WebhookFormat = Field(default="rljob", description="rljob (signed JSON with ids) or slack ({'text': ...})")

    @field_validator("url_env", "secret_env")
    @classmethod
    def _env_name(cls, v: str | None) -> str | None:
        if v is not None and not ENV_NAME.match(v):
            raise ValueError(f"{v!r} is not an environment variable name")
        return v

    @field_validator("events")
    @classmethod
    def _events(cls, v: list[str]) -> list[str]:
        unknown = [e for e in v if e not in WEBHOOK_EVENTS]
        if unknown:
            raise ValueError(f"unknown event {unknown[0]!r}: choose from {', '.join(WEBHOOK_EVENTS)}")
        return v

    @field_validator("name")
    @classmethod
    def _name(cls, v: str | None) -> str | None:
        if v is not None and not ENDPOINT_NAME.match(v):
            raise ValueError(f"{v!r}: a name is lowercase letters, digits, '.' and '-', at most 63")
        return v

    @model_validator(mode="after")
    def _sources(self) -> WebhookEndpointConfig:
        if (self.url is None) == (self.url_env is None):
            raise ValueError("give exactly one of url and url_env")
        if self.secret is not None and self.secret_env is not None:
            raise ValueError("give one of secret and secret_env, not both")
        if self.format == "rljob" and self.secret is None and self.secret_env is None:
            raise ValueError("an rljob-format endpoint is signed: give secret_env (or secret)")
        if self.secret is not None and not self.secret.get_secret_value():
            raise ValueError("secret is empty")
        # Read now, so a missing variable stops the service at start-up rather than every delivery failing later.
        problem = url_problem(self.resolved_url())
        if problem is not None:
            raise ValueError(f"{'url' if self.url is not None else self.url_env}: the URL {problem}")
        self.resolved_secret()
        return self

    def resolved_url(self) -> str:
        if self.url is not None:
            return self.url.get_secret_value()
        return _env_value(self.url_env or "", "the endpoint's URL")

    def resolved_secret(self) -> bytes | None:
        if self.secret is not None:
            return self.secret.get_secret_value().encode()
        if self.secret_env is not None:
            return _env_value(self.secret_env, "the endpoint's signing secret").encode()
        return None

    def display_name(self) -> str:
        if self.name is not None:
            return self.name
        if self.url_env is not None:
            return self.url_env.lower().replace("_", "-")[:63]
        parts = urlsplit(self.resolved_url())
        return f"{parts.hostname}:{parts.port}" if parts.port else str(parts.hostname)


def _env_value(name: str, what: str) -> str:
    value = os.environ.get(name, "")
    if not value:
        raise ValueError(f"environment variable {name} ({what}) is not set")
    return value


@dataclass(frozen=True)
class WebhookEndpoint:
    """A configured endpoint, resolved: its URL and secret are kept out of repr (and so out of logs)."""

    team: str
    name: str
    url: str = field(repr=False)
    secret: bytes | None = field(repr=False)
    events: frozenset[str]
    format: WebhookFormat

    @property
    def key(self) -> str:
        return f"{self.team}/{self.name}"

    @property
    def host(self) -> str:
        return str(urlsplit(self.url).hostname)


def resolve_endpoints(config: dict[str, list[WebhookEndpointConfig]]) -> list[WebhookEndpoint]:
    return [
        WebhookEndpoint(
            team=team,
            name=c.display_name(),
            url=c.resolved_url(),
            secret=c.resolved_secret(),
            events=frozenset(c.events),
            format=c.format,
        )
        for team, configs in sorted(config.items())
        for c in configs
    ]


class DeliveryState(enum.StrEnum):
    PENDING = "pending"  # waiting for its first attempt or a retry
    DELIVERED = "delivered"  # a 2xx came back
    FAILED = "failed"  # given up: out of attempts, refused (a 4xx, a redirect), or its endpoint's queue was full


@dataclass(frozen=True)
class NewDelivery:
    id: str
    team: str
    endpoint: str
    seq: int
    event: str
    job_id: str
    body: str
    created_at: datetime


@dataclass(frozen=True)
class PendingDelivery:
    id: str
    team: str
    endpoint: str
    seq: int
    event: str
    body: str
    attempts: int


@dataclass(frozen=True)
class Claim:
    """The endpoint's next delivery, leased to this sender; or how long until one is due (None: nothing queued)."""

    delivery: PendingDelivery | None = None
    wait_s: float | None = None


@dataclass(frozen=True)
class Outcome:
    """What one attempt came to, as the store keeps it."""

    state: DeliveryState
    attempts: int
    next_attempt_at: datetime | None
    status: int | None
    error: str | None
    at: datetime


@dataclass(frozen=True)
class SendResult:
    """What the HTTP adapter saw: a status (None: no response), and why not, for the delivery's last_error."""

    status: int | None
    error: str | None = None
    location: str | None = None  # a 3xx's Location (never followed)


class WebhookDeliveryPublic(BaseModel):
    id: str = Field(description="stable per (endpoint, event): the receiver's deduplication key (X-Rljob-Delivery)")
    team: str
    endpoint: str = Field(description="the endpoint's name (its URL and secret are never shown)")
    event: str = Field(description="job.phase, job.health, eval.result, job.budget, job.hung or job.stranded")
    seq: int = Field(description="the job event log entry it tells of")
    job_id: str
    state: DeliveryState
    attempts: int
    created_at: datetime
    next_attempt_at: datetime | None = Field(description="pending: when the next attempt is due")
    delivered_at: datetime | None
    last_status: int | None = Field(description="the HTTP status of the last attempt; null when none came back")
    last_error: str | None = Field(description="why the last attempt failed")


class WebhookDeliveriesPublic(BaseModel):
    data: list[WebhookDeliveryPublic]
    count: int
    pending: int = Field(description="deliveries of these endpoints still pending")
    failed: int = Field(description="deliveries of these endpoints given up")


class WebhookQueue(Protocol):
    """The delivery queue and its cursor into the job event log (adapters/store/webhook_rows.py)."""

    def cursor(self) -> int:
        """The last event seq queued for; on first use, the newest event's (webhooks start from now, not history)."""

    def new_events(self, after_seq: int, kinds: frozenset[str], limit: int) -> tuple[list[JobEvent], int]:
        """Entries of `kinds` after `after_seq`, oldest first, among the next `limit` of any kind; and the last seq read."""

    def enqueue(self, deliveries: list[NewDelivery], *, cursor: int, max_pending: int) -> None:
        """Store the deliveries (one per (endpoint, seq): a second is ignored) and move the cursor to `cursor`, as one
        write; one past an endpoint's `max_pending` pending is stored failed (queue full)."""

    def claim(self, team: str, endpoint: str, now: datetime, lease_s: float) -> Claim: ...

    def finish(self, delivery_id: str, outcome: Outcome) -> None: ...

    def deliveries(self, team: str | None, state: DeliveryState | None, limit: int) -> WebhookDeliveriesPublic: ...


class WebhookTransport(Protocol):
    def post(self, url: str, body: bytes, headers: dict[str, str], *, connect_timeout_s: float, read_timeout_s: float) -> SendResult:
        """POST once, following no redirect; never raises for the receiver's doing."""
