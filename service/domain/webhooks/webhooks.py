"""What webhooks send and when: the job event log's entries that become notifications, and the signed body.

The job event log (store.events_after) is the source: every notification is one of its entries, so nothing is lost
across a restart or a change of leader (webhook_dispatch.py reads it from a stored cursor). RULES maps a log kind
to a webhook event type: one row per kind (most specific first); adding a kind is adding a row. One log entry is at
most one delivery per endpoint: the first rule that matches and that the endpoint subscribes to.

The body is built once, when the delivery is queued, and stored: a retry, or another replica after a failover,
sends the same bytes under the same delivery id, which is stable per (endpoint, event seq) so a receiver
deduplicates. Each attempt signs `timestamp + "." + body` with the endpoint's secret (HMAC-SHA256), sent as
`X-Rljob-Signature: t=<unix seconds>,v1=<hex>`: a receiver recomputes it, compares in constant time and refuses a
timestamp outside its replay window (docs/service.md, webhooks).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from service.domain.evals.eval_view import eval_summary
from service.domain.records.models import JobEvent, JobRecord
from service.domain.records.phases import JobPhase
from service.domain.records.ports import STRANDED_REASON

WebhookFormat = Literal["rljob", "slack"]
SIGNATURE_HEADER = "X-Rljob-Signature"
DELIVERY_HEADER = "X-Rljob-Delivery"
EVENT_HEADER = "X-Rljob-Event"
MAX_TEXT_CHARS = 2000  # one message in a body (a job's message, a health verdict's): Slack shows ~3000 at most
MAX_BODY_BYTES = 64 * 1024  # a body larger than this drops its `data` (the text and ids stay)


@dataclass(frozen=True)
class Notice:
    """What one log entry tells a receiver: a line for people and the facts for programs."""

    text: str
    data: dict[str, Any]


Rule = Callable[[JobEvent, JobRecord], Notice | None]


def _job(record: JobRecord) -> str:
    return f"job {record.id} ({record.name}, team {record.team})"


def _eval_result(event: JobEvent, record: JobRecord) -> Notice | None:
    """An eval job (one submitted, or one attached to a training job) that SUCCEEDED: its scores."""
    summary = eval_summary(record)
    if summary is None or event.data.get("phase") != JobPhase.SUCCEEDED.value:
        return None
    text = f"eval {_job(record)} finished"
    if summary.primary is not None and summary.primary in summary.scores:
        pass1 = summary.scores[summary.primary].pass_at_1
        text += f": {summary.primary} pass@1 {pass1.value:.3f} [{pass1.ci95[0]:.3f}, {pass1.ci95[1]:.3f}] on {summary.suite.name}"
    data = {"eval_job": summary.model_dump(mode="json", by_alias=True), "labels": record.labels}
    return Notice(text, data)


def _phase(event: JobEvent, record: JobRecord) -> Notice | None:
    phase, message = event.data.get("phase"), event.data.get("message") or ""
    text = f"{_job(record)} is {phase}" + (f": {message}" if message else "")
    return Notice(text, dict(event.data))


def _health(event: JobEvent, record: JobRecord) -> Notice | None:
    verdict, message = event.data.get("verdict"), event.data.get("message") or ""
    text = f"{_job(record)} learning health: {verdict}" + (f" ({message})" if message else "")
    return Notice(text, dict(event.data))


def _hold(event: JobEvent, record: JobRecord) -> Notice | None:
    held, message = bool(event.data.get("held")), event.data.get("message") or ""
    text = f"{_job(record)} {'held: its team is over budget' if held else 'released from its budget hold'}" + (
        f" ({message})" if message else ""
    )
    return Notice(text, dict(event.data))


def _hung(event: JobEvent, record: JobRecord) -> Notice | None:
    d = event.data
    where = f"stage {d.get('stage')}, step {d.get('step')}"
    text = f"{_job(record)} attempt {d.get('attempt')} hung at {where}: no progress for {d.get('idle_s')} s (limit {d.get('limit_s')} s)"
    return Notice(text, {k: v for k, v in d.items() if k != "stacks"})  # the stacks are in the run's log, not a webhook


def _stranded(event: JobEvent, record: JobRecord) -> Notice | None:
    """An admitted job whose pod no node of its flavor can take, past the limit (service/adapters/k8s/stranded.py)."""
    if event.data.get("reason") != STRANDED_REASON:
        return None
    return Notice(f"{_job(record)} is {event.data.get('message') or 'stranded'}", dict(event.data))


# (log kind, webhook event, rule): the log entries that are sent. Most specific first (an eval job's SUCCEEDED is an
# eval.result for an endpoint that takes those, else a job.phase). Add a kind here, and it is sent.
RULES: tuple[tuple[str, str, Rule], ...] = (
    ("phase", "eval.result", _eval_result),
    ("phase", "job.phase", _phase),
    ("health", "job.health", _health),  # verdict changes: stalled, diverging, no-signal, and back
    ("hold", "job.budget", _hold),  # a budget crossing: the team's job held (stopped) or released (budget_reconciler.py)
    ("hung", "job.hung", _hung),  # the trainer's watchdog found an attempt hung (progress.py folds its event)
    ("message", "job.stranded", _stranded),  # only a message whose reason is Stranded; other messages are not sent
)
WEBHOOK_EVENTS: tuple[str, ...] = tuple(dict.fromkeys(event for _, event, _ in RULES))
LOGGED_KINDS: frozenset[str] = frozenset(kind for kind, _, _ in RULES)


def notice_for(event: JobEvent, record: JobRecord, subscribed: frozenset[str]) -> tuple[str, Notice] | None:
    """The webhook event and notice this log entry is for an endpoint taking `subscribed` events; None: nothing."""
    for kind, webhook_event, rule in RULES:
        if kind == event.kind and webhook_event in subscribed and (notice := rule(event, record)) is not None:
            return webhook_event, notice
    return None


def delivery_id(team: str, endpoint: str, seq: int) -> str:
    """Stable per (endpoint, event seq): every replica, every retry, computes the same one."""
    return "whd_" + hashlib.sha256(f"{team}/{endpoint}:{seq}".encode()).hexdigest()[:24]


def _clip(value: Any) -> Any:
    """Strings in a body are bounded (a job's message is the job's text: it can be long)."""
    if isinstance(value, str):
        return value if len(value) <= MAX_TEXT_CHARS else value[: MAX_TEXT_CHARS - 1] + "…"
    if isinstance(value, dict):
        return {k: _clip(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clip(v) for v in value]
    return value


def slack_escaped(text: str) -> str:
    """`text` with Slack's three control characters as the entities Slack decodes for display ("Formatting text for app
    surfaces", Escaping text: https://api.slack.com/reference/surfaces/formatting#escaping): & as &amp;, < as &lt;,
    > as &gt;, and nothing else (Slack decodes no other entity). A notice's text carries a job's name, its messages and
    its error text, and rljob writes no Slack markup of its own, so the whole text is escaped: `<!channel>`, `<@U123>`
    or `<http://evil|click here>` in a job's text reach the channel as those characters, not a mention or a disguised
    link."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def build_body(fmt: WebhookFormat, *, delivery: str, webhook_event: str, event: JobEvent, record: JobRecord, notice: Notice) -> bytes:
    """The JSON body for `fmt`: Slack's incoming-webhook shape ({"text": ...}), or rljob's own with the ids."""
    text = _clip(notice.text)
    if fmt == "slack":
        return json.dumps({"text": slack_escaped(text)}, ensure_ascii=False).encode()
    body: dict[str, Any] = {
        "id": delivery,
        "type": webhook_event,
        "seq": event.seq,
        "time": event.time.isoformat(),
        "team": record.team,
        "job": {"id": record.id, "name": record.name},
        "text": text,
        "data": _clip(notice.data),
    }
    encoded = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
    if len(encoded) > MAX_BODY_BYTES:
        body["data"] = {"truncated": True}
        encoded = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
    return encoded


def signature(secret: bytes, timestamp: int, body: bytes) -> str:
    """The X-Rljob-Signature header's value: t=<unix seconds>,v1=<HMAC-SHA256(secret, "<t>." + body), hex>."""
    mac = hmac.new(secret, f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={mac}"


def signed_headers(*, delivery: str, webhook_event: str, body: bytes, secret: bytes | None, now: datetime) -> dict[str, str]:
    headers = {"Content-Type": "application/json", "User-Agent": "rljob-webhooks/1", DELIVERY_HEADER: delivery, EVENT_HEADER: webhook_event}
    if secret is not None:
        headers[SIGNATURE_HEADER] = signature(secret, int(now.timestamp()), body)
    return headers
