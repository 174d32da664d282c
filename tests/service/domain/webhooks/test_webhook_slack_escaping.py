"""A Slack-format webhook carries a job's text as text: Slack's control characters (&, <, >) escaped as Slack's
"Formatting text for app surfaces" says (https://api.slack.com/reference/surfaces/formatting#escaping), so a job named
`<!channel>` or failing with `<http://evil|click here>` notifies nobody and links nowhere (webhooks.slack_escaped).
Every rule that sends a job's or a user's text (its name, a phase's message, a health verdict's, a hold's, a hung
attempt's stage), then one delivery through the real dispatcher to a receiver on loopback."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from service.adapters.store import SqlJobStore
from service.adapters.store.webhook_rows import SqlWebhookQueue
from service.adapters.webhook_sender import HttpWebhookTransport
from service.domain.records.models import JobEvent, JobRecord
from service.domain.records.phases import JobPhase
from service.domain.records.ports import utc_now
from service.domain.webhooks.webhook_dispatch import DeliveryPolicy, WebhookDispatcher
from service.domain.webhooks.webhook_models import DeliveryState, WebhookEndpoint
from service.domain.webhooks.webhooks import WEBHOOK_EVENTS, build_body, notice_for
from service.leader_rounds import RoundLoops
from tests.service.domain.webhooks.webhook_receiver import Receiver, serving
from tests.service.service_helpers import record_spec, wait_until

HOSTILE = "<!channel> <!here> <@U123> <http://evil.example|click here> & <#C1>"
ESCAPED = "&lt;!channel&gt; &lt;!here&gt; &lt;@U123&gt; &lt;http://evil.example|click here&gt; &amp; &lt;#C1&gt;"
NOW = datetime(2030, 1, 1, tzinfo=UTC)
RECORD = JobRecord(
    id="rl-abcdefabcdef",
    team="team-a",
    name=HOSTILE,
    spec=record_spec(),
    spec_hash="h",
    phase=JobPhase.FAILED,
    created_at=NOW,
    updated_at=NOW,
)


def _event(kind: str, **data: object) -> JobEvent:
    return JobEvent(seq=7, job_id=RECORD.id, team="team-a", kind=kind, time=NOW, data=data)


def _slack_text(event: JobEvent, record: JobRecord = RECORD) -> tuple[str, str]:
    """The Slack body's text, and the rljob body's (unescaped) for the same entry."""
    found = notice_for(event, record, frozenset(WEBHOOK_EVENTS))
    assert found is not None
    webhook_event, notice = found
    bodies = [
        json.loads(build_body(fmt, delivery="d", webhook_event=webhook_event, event=event, record=record, notice=notice))["text"]
        for fmt in ("slack", "rljob")
    ]
    return bodies[0], bodies[1]


@pytest.mark.parametrize(
    "event",
    [
        _event("phase", phase="FAILED", previous="RUNNING", message=f"reward crashed: {HOSTILE}"),
        _event("health", verdict="stalled", previous=None, message=HOSTILE),
        _event("hold", held=True, message=HOSTILE),
        _event("hung", attempt=1, stage=HOSTILE, step=4, idle_s=1900.0, limit_s=1800.0),
    ],
    ids=["phase", "health", "hold", "hung"],
)
def test_a_jobs_name_and_text_reach_slack_escaped(event: JobEvent) -> None:
    slack, plain = _slack_text(event)
    assert "<" not in slack and ">" not in slack  # no mention, no link, no channel reference can open
    assert slack.count(ESCAPED) == plain.count(HOSTILE) >= 1  # the name (and the message) each escaped in place
    # Only the three characters change, and each to the entity Slack decodes back: readers see the job's own text.
    assert slack.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&") == plain
    assert plain.count(HOSTILE) >= 1  # the rljob format is for programs: its text is the job's, unchanged


def test_text_that_already_looks_escaped_is_escaped_again() -> None:
    """A job's `&lt;!channel&gt;` is shown as typed: its & is escaped, so Slack does not decode it into a mention."""
    slack, _ = _slack_text(_event("phase", phase="FAILED", message="&lt;!channel&gt;"))
    assert "&amp;lt;!channel&amp;gt;" in slack


def test_a_failed_job_named_to_ping_the_channel_reaches_the_receiver_escaped(tmp_path: Path) -> None:
    store = SqlJobStore(f"sqlite:///{tmp_path / 'rljob.db'}")
    store.migrate()
    try:
        with serving(Receiver()) as chat:
            endpoint = WebhookEndpoint("team-a", "chat", chat.url, None, frozenset({"job.phase"}), "slack")
            policy = DeliveryPolicy(connect_timeout_s=1.0, read_timeout_s=2.0, idle_check_s=0.05)
            dispatcher = WebhookDispatcher(
                store,
                SqlWebhookQueue(store.engine),
                HttpWebhookTransport(),
                [endpoint],
                policy=policy,
                clock=utc_now,
                enqueue_interval_s=0.05,
            )
            dispatcher.queue.cursor()  # webhooks start from now
            now = datetime.now(UTC)
            record = dataclasses.replace(RECORD, created_at=now, updated_at=now)
            with store.transaction() as tx:
                tx.insert(record)
                tx.append_event(record, "phase", {"phase": "FAILED", "previous": "RUNNING", "message": f"train: {HOSTILE}"}, now)
            loops = RoundLoops(dispatcher.rounds())  # as the leader's supervisor runs them
            loops.start()
            try:
                wait_until(
                    lambda: (
                        [d.state for d in SqlWebhookQueue(store.engine).deliveries("team-a", None, 10).data] == [DeliveryState.DELIVERED]
                    )
                )
            finally:
                loops.stop()
            (body,) = chat.bodies()
    finally:
        store.close()
    assert set(body) == {"text"} and body["text"].count(ESCAPED) == 2  # the name and the failure message
    assert "<" not in body["text"] and ">" not in body["text"]
