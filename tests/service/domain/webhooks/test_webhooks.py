"""Webhooks as tables: which job event log entries are sent as what (webhooks.RULES), what an attempt's answer makes
of a delivery (webhook_dispatch.outcome_of), the backoff, and RLJOB_TEAM_WEBHOOKS's validation (secrets never shown)."""

from __future__ import annotations

import hashlib
import hmac
import json
from datetime import UTC, datetime, timedelta

import pytest

from service.config import load_settings
from service.domain.records.models import JobEvent, JobRecord
from service.domain.records.phases import JobPhase
from service.domain.webhooks.webhook_dispatch import DeliveryPolicy, outcome_of, retry_delay_s
from service.domain.webhooks.webhook_models import DeliveryState, PendingDelivery, SendResult
from service.domain.webhooks.webhooks import build_body, delivery_id, notice_for, signature
from service.settings_env import SettingsInvalid
from tests.service.service_helpers import record_spec

NOW = datetime(2030, 1, 1, tzinfo=UTC)
ALL = frozenset({"job.phase", "job.health", "eval.result", "job.budget", "job.hung"})
RECORD = JobRecord(
    id="rl-abcdefabcdef", team="team-a", name="j", spec=record_spec(), spec_hash="h", phase=JobPhase.RUNNING, created_at=NOW, updated_at=NOW
)


def _event(kind: str, **data: object) -> JobEvent:
    return JobEvent(seq=7, job_id=RECORD.id, team="team-a", kind=kind, time=NOW, data=data)


@pytest.mark.parametrize(
    ("event", "subscribed", "expected"),
    [
        (_event("phase", phase="RUNNING", previous="LAUNCHING", message="started"), ALL, ("job.phase", "is RUNNING: started")),
        (_event("phase", phase="RUNNING"), frozenset({"job.health"}), None),  # not subscribed
        (_event("health", verdict="stalled", message="no step for 10m", previous=None), ALL, ("job.health", "learning health: stalled")),
        (_event("hold", held=True, message="team-a over"), ALL, ("job.budget", "held: its team is over budget")),
        (_event("hold", held=False, message=""), ALL, ("job.budget", "released from its budget hold")),
        (
            _event("hung", attempt=1, stage="train", step=4, idle_s=1900.0, limit_s=1800.0, stacks="x"),
            ALL,
            ("job.hung", "hung at stage train, step 4"),
        ),
        (_event("progress", step=3), ALL, None),  # not a kind that is sent
        (_event("phase", phase="SUCCEEDED"), frozenset({"eval.result"}), None),  # a training job has no eval result
    ],
)
def test_log_entries_map_to_webhook_events(event: JobEvent, subscribed: frozenset[str], expected: tuple[str, str] | None) -> None:
    found = notice_for(event, RECORD, subscribed)
    if expected is None:
        assert found is None
        return
    assert found is not None and found[0] == expected[0] and expected[1] in found[1].text, found


def test_a_body_carries_the_stable_id_and_the_signature_is_hmac_over_timestamp_dot_body() -> None:
    did = delivery_id("team-a", "ops", 7)
    assert did == delivery_id("team-a", "ops", 7) != delivery_id("team-a", "ops", 8) != delivery_id("team-a", "chat", 7)
    event = _event("phase", phase="FAILED", message="x" * 10_000)
    found = notice_for(event, RECORD, ALL)
    assert found is not None
    body = build_body("rljob", delivery=did, webhook_event=found[0], event=event, record=RECORD, notice=found[1])
    parsed = json.loads(body)
    assert (parsed["id"], parsed["type"], parsed["seq"], parsed["job"]["id"]) == (did, "job.phase", 7, RECORD.id)
    assert len(parsed["data"]["message"]) <= 2000  # bounded
    slack = json.loads(build_body("slack", delivery=did, webhook_event=found[0], event=event, record=RECORD, notice=found[1]))
    assert list(slack) == ["text"]
    mac = hmac.new(b"k", b"1700000000." + body, hashlib.sha256).hexdigest()
    assert signature(b"k", 1_700_000_000, body) == f"t=1700000000,v1={mac}"


POLICY = DeliveryPolicy(max_attempts=3, retry_base_s=2.0, retry_max_s=300.0)
HEAD = PendingDelivery("whd_x", "team-a", "ops", 7, "job.phase", "{}", attempts=0)


@pytest.mark.parametrize(
    ("result", "attempts_before", "state", "retried"),
    [
        (SendResult(204), 0, DeliveryState.DELIVERED, False),
        (SendResult(500, "answered 500"), 0, DeliveryState.PENDING, True),
        (SendResult(429, "answered 429"), 1, DeliveryState.PENDING, True),
        (SendResult(None, "did not answer in time"), 1, DeliveryState.PENDING, True),
        (SendResult(None, "did not answer in time"), 2, DeliveryState.FAILED, False),  # the bound
        (SendResult(302, location="http://elsewhere/"), 0, DeliveryState.FAILED, False),  # never followed
        (SendResult(404, "answered 404"), 0, DeliveryState.FAILED, False),  # refused: not retried
    ],
)
def test_an_attempts_answer_decides_the_delivery(result: SendResult, attempts_before: int, state: DeliveryState, retried: bool) -> None:
    head = PendingDelivery(**{**HEAD.__dict__, "attempts": attempts_before})
    outcome = outcome_of(head, result, NOW, POLICY, draw=0.0)
    assert (outcome.state, outcome.attempts, outcome.next_attempt_at is not None) == (state, attempts_before + 1, retried)
    if retried:
        assert outcome.next_attempt_at == NOW + timedelta(seconds=retry_delay_s(attempts_before + 1, POLICY, 0.0))


def test_the_backoff_doubles_with_jitter_up_to_its_cap() -> None:
    assert [retry_delay_s(n, POLICY, 0.0) for n in (1, 2, 3)] == [1.0, 2.0, 4.0]  # jitter's low end: half
    assert [retry_delay_s(n, POLICY, 0.999999) for n in (1, 2)] == pytest.approx([2.0, 4.0])
    assert retry_delay_s(20, POLICY, 0.5) == 300.0 * 0.75  # capped


@pytest.mark.parametrize(
    ("endpoints", "why"),
    [
        ([{"url": "ftp://h/x", "secret": "s"}], "http:// or https://"),
        ([{"url": "https://user:pw@h/x", "secret": "s"}], "credentials"),
        ([{"url": "https://h/x"}], "signed: give secret_env"),
        ([{"url": "https://h/x", "secret": "s", "events": ["job.nope"]}], "unknown event"),
        ([{"url_env": "TEAM_A_UNSET_HOOK_URL", "format": "slack"}], "TEAM_A_UNSET_HOOK_URL"),
        ([{"url": "https://h/a", "secret": "s"}, {"url": "https://h/b", "secret": "s"}], "distinct name"),
    ],
)
def test_bad_endpoints_are_refused_naming_the_setting(endpoints: list[dict[str, object]], why: str) -> None:
    with pytest.raises(SettingsInvalid) as refused:
        load_settings(team_webhooks=json.dumps({"team-a": endpoints}))
    assert "RLJOB_TEAM_WEBHOOKS" in str(refused.value) and why in str(refused.value)


def test_secrets_and_urls_are_read_from_the_environment_and_never_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEAM_A_SLACK", "https://hooks.example/services/T0/B0/sekrit")
    monkeypatch.setenv("TEAM_A_SECRET", "signing-sekrit")
    settings = load_settings(
        team_webhooks=json.dumps(
            {"team-a": [{"url_env": "TEAM_A_SLACK", "format": "slack"}, {"url": "https://x.example/h", "secret_env": "TEAM_A_SECRET"}]}
        )
    )
    slack, signed = settings.team_webhooks["team-a"]
    assert (slack.display_name(), signed.display_name()) == ("team-a-slack", "x.example")
    assert signed.resolved_secret() == b"signing-sekrit"
    assert "sekrit" not in repr(settings) and "sekrit" not in str(settings.model_dump())
