"""The SLA-breach webhook (``POST {url}/notifications/sla-breach``) against a loopback receiver:
the body, the signature, the idempotency key, and a receiver that fails or hangs, retried without
telling the other channels twice."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import boto3
import pytest
from pydantic import ValidationError

from rebound.adapters.notify import ChannelNotifier
from rebound.adapters.secrets import SecretResolver
from rebound.adapters.sla_webhook import SlaWebhookChannel
from rebound.adapters.targets.http import verify_signature
from rebound.engine.deps import Deps
from rebound.engine.escalation import Escalation
from rebound.engine.ports import DeliveryFailed
from rebound.settings import Settings
from support import loopback_http

pytestmark = pytest.mark.integration

KEY = "whsec-sla-0123456789abcdef"
KEY_PARAM = "/rebound/test/notifications/sla-webhook"
BREACH = {
    "task_id": "acme.invoice-export",
    "run_id": "acme.invoice-export:20260307T090000Z",
    "tenant": "acme",
    "kind": "duration",
    "limit_s": 60,
    "measured_s": 95.2,
    "attempt": 1,
}


@dataclass
class Receiver:
    status: int = 202
    delay_s: float = 0.0
    requests: list[tuple[str, bytes, dict[str, str]]] = field(default_factory=list)
    base: str = ""


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    state = Receiver()

    def answer(path: str, body: bytes, headers: Mapping[str, str]) -> tuple[int, bytes]:
        state.requests.append((path, body, dict(headers)))
        time.sleep(state.delay_s)
        return state.status, b'{"received": true}'

    with loopback_http(answer) as base:
        state.base = base
        yield state


@dataclass
class Topic:
    """Another channel that takes alerts (as the SNS topic does)."""

    name: str = "sns"
    alerts: list[str] = field(default_factory=list)

    def alert(self, subject: str, body: dict[str, Any], severity: str) -> str:
        self.alerts.append(subject)
        return f"message {len(self.alerts)}"


@pytest.fixture
def webhook(aws: boto3.session.Session, receiver: Receiver, clock: Any) -> SlaWebhookChannel:
    aws.client("ssm").put_parameter(Name=KEY_PARAM, Value=KEY, Type="SecureString")
    secrets = SecretResolver(lambda: aws.client("ssm"), lambda: aws.client("secretsmanager"))
    return SlaWebhookChannel(receiver.base + "/hooks/", secrets, KEY_PARAM, clock, timeout_s=0.5)


def test_a_breach_is_posted_signed_with_its_idempotency_key(
    deps: Deps, webhook: SlaWebhookChannel, receiver: Receiver, clock: Any
) -> None:
    topic = Topic()
    deps.notifier = ChannelNotifier([], [topic, webhook])  # type: ignore[list-item]
    assert Escalation(deps).on_sla_breached(dict(BREACH)).startswith("notified")

    [(path, body, headers)] = receiver.requests
    assert path == "/hooks/notifications/sla-breach"
    document = json.loads(body)
    assert document["breach"] == BREACH
    assert (document["severity"], document["environment"]) == ("warning", deps.settings.environment)
    assert headers["Idempotency-Key"] == f"sla#{BREACH['run_id']}#duration"
    now = int(clock.now().timestamp())
    assert verify_signature(KEY.encode(), headers["X-Rebound-Signature"], body, now=now)
    assert not verify_signature(b"not the key", headers["X-Rebound-Signature"], body, now=now)
    assert len(topic.alerts) == 1


def test_a_receiver_that_fails_is_retried_and_the_other_channels_are_not_told_twice(
    deps: Deps, webhook: SlaWebhookChannel, receiver: Receiver
) -> None:
    topic = Topic()
    deps.notifier = ChannelNotifier([], [topic, webhook])  # type: ignore[list-item]
    receiver.status = 500
    with pytest.raises(DeliveryFailed, match="HTTP 500") as caught:
        Escalation(deps).on_sla_breached(dict(BREACH))
    assert caught.value.channel == "sla_webhook"
    assert len(topic.alerts) == 1

    receiver.status = 200  # the event is delivered again: only the webhook is tried
    assert Escalation(deps).on_sla_breached(dict(BREACH)).startswith("notified")
    assert len(topic.alerts) == 1
    assert [r[0] for r in receiver.requests] == ["/hooks/notifications/sla-breach"] * 2
    assert Escalation(deps).on_sla_breached(dict(BREACH)).startswith("notified")  # a duplicate: nothing sent
    assert len(receiver.requests) == 2


def test_a_receiver_that_hangs_is_a_timeout(
    deps: Deps, webhook: SlaWebhookChannel, receiver: Receiver
) -> None:
    receiver.delay_s = 1.5
    deps.notifier = ChannelNotifier([], [webhook])
    with pytest.raises(DeliveryFailed, match="TIMEOUT"):
        Escalation(deps).on_sla_breached(dict(BREACH))


def test_the_webhook_takes_sla_breaches_only(webhook: SlaWebhookChannel, receiver: Receiver) -> None:
    sent, failed = ChannelNotifier([], [webhook]).alert_each("resource exhausted", {"run_id": "r"}, "warning")
    assert (sent, failed, receiver.requests) == ({}, {}, [])


@pytest.mark.parametrize("url", ["ftp://hooks.example.com", "https://hooks.example.com/x?token=1", ""])
def test_a_webhook_url_that_is_not_one_base_url_is_refused_naming_the_setting(deps: Deps, url: str) -> None:
    data = {**deps.settings.model_dump(), "sla_webhook_url": url}
    with pytest.raises(ValidationError) as caught:
        Settings.model_validate(data)
    assert [e["loc"][-1] for e in caught.value.errors()] == ["sla_webhook_url"]


def test_the_environment_file_takes_an_https_webhook_and_its_key_by_reference_only() -> None:
    from rebound_infra.config import NotificationsConfig

    ok = NotificationsConfig(
        sla_webhook_url="https://hooks.example.com/rebound", sla_webhook_secret="/rebound/k"
    )
    assert ok.sla_webhook_url == "https://hooks.example.com/rebound"
    for bad, where in (
        ({"sla_webhook_url": "http://hooks.example.com"}, "sla_webhook_url"),
        ({"sla_webhook_secret": "plain-text-key"}, "sla_webhook_secret"),
    ):
        with pytest.raises(ValidationError) as caught:
            NotificationsConfig.model_validate(bad)
        assert [e["loc"][-1] for e in caught.value.errors()] == [where]
