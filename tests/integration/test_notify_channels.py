"""Notification channels: PagerDuty and Slack against a loopback HTTP server, SNS on moto.

Secrets live in moto's SSM (SecureString) and Secrets Manager; none may reach a log record.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import socket
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import boto3
import pytest

from rebound.adapters.notify import (
    ChannelNotifier,
    DeliveryFailed,
    Notification,
    PagerDutyChannel,
    SlackChannel,
    SnsChannel,
)
from rebound.adapters.secrets import SecretResolver
from rebound.domain.basics import Severity
from rebound.domain.errors import OperationalError
from rebound.domain.ids import work_order_id
from rebound.domain.work_order import DeliveryStatus, Resolution, WorkOrder, WorkOrderState
from rebound.engine.deps import Deps
from rebound.settings import Settings, settings_from_env, settings_to_env
from support import loopback_http

pytestmark = pytest.mark.integration

ROUTING_KEY = "R0UT1NGKEY0123456789abcdefABCDEF"
PD_PARAM = "/rebound/test/pagerduty"
SLACK_TOKEN = "xoxb-SLACKTOKEN-abcdef123456"


@dataclass
class Receiver:
    status: int = 202
    body: bytes = b'{"status": "success", "message": "Event processed"}'
    requests: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    by_path: dict[str, tuple[int, bytes]] = field(default_factory=dict)
    """Answers for paths starting with a key, instead of ``status`` and ``body``."""
    base: str = ""

    def answer(self, path: str) -> tuple[int, bytes]:
        return next((v for k, v in self.by_path.items() if path.startswith(k)), (self.status, self.body))


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    state = Receiver()

    def answer(path: str, body: bytes, headers: Mapping[str, str]) -> tuple[int, bytes]:
        state.requests.append((path, json.loads(body)))
        return state.answer(path)

    with loopback_http(answer) as base:
        state.base = base
        yield state


@pytest.fixture
def secrets(aws: boto3.session.Session) -> SecretResolver:
    return SecretResolver(lambda: aws.client("ssm"), lambda: aws.client("secretsmanager"))


@pytest.fixture
def pagerduty(aws: boto3.session.Session, receiver: Receiver, secrets: SecretResolver) -> PagerDutyChannel:
    aws.client("ssm").put_parameter(Name=PD_PARAM, Value=ROUTING_KEY, Type="SecureString")
    return PagerDutyChannel(secrets, PD_PARAM, url=f"{receiver.base}/v2/enqueue", timeout_s=2)


@pytest.fixture
def webhook_url(receiver: Receiver) -> str:
    return f"{receiver.base}/services/T000/B000/{SLACK_TOKEN}"


@pytest.fixture
def slack(aws: boto3.session.Session, webhook_url: str, secrets: SecretResolver) -> SlackChannel:
    arn = aws.client("secretsmanager").create_secret(Name="rebound/test/slack", SecretString=webhook_url)[
        "ARN"
    ]
    return SlackChannel(secrets, arn, timeout_s=2)


def a_note(clock: Any, **changes: Any) -> Notification:
    order = WorkOrder(
        work_order_id=work_order_id("run#run-7"),
        subject="run#run-7",
        run_id="run-7",
        task_id="billing",
        tenant="acme",
        severity=Severity.CRITICAL,
        reason="retries_exhausted",
        error_code="HTTP_503",
        attempts=5,
        runbook_url="https://runbooks.example.com/dead-lettered-run",
        opened_at=clock.now(),
    )
    return Notification(order.model_copy(update=changes), "test")


def refused_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# --------------------------------------------------------------------------- PagerDuty


def test_pagerduty_trigger_is_deduplicated_by_work_order(
    pagerduty: PagerDutyChannel, receiver: Receiver, clock: Any
) -> None:
    note = a_note(clock)

    detail = pagerduty.send(note)

    path, event = receiver.requests[0]
    assert path == "/v2/enqueue"
    assert event["routing_key"] == ROUTING_KEY
    assert event["event_action"] == "trigger"
    assert event["dedup_key"] == note.order.work_order_id
    assert event["links"] == [{"href": "https://runbooks.example.com/dead-lettered-run", "text": "Runbook"}]
    payload = event["payload"]
    assert payload["severity"] == "critical"
    assert payload["source"] == "rebound-test"
    assert payload["component"] == "billing"
    assert payload["group"] == "acme"
    assert "billing dead-lettered (retries_exhausted, HTTP_503) after 5 attempts" in payload["summary"]
    assert payload["timestamp"] == "2026-03-07T09:00:00.000Z"
    assert payload["custom_details"]["work_order_id"] == note.order.work_order_id
    assert payload["custom_details"]["run_id"] == "run-7"
    assert note.order.work_order_id in detail
    assert ROUTING_KEY not in detail


@pytest.mark.parametrize(
    ("severity", "pd_severity"),
    [
        (Severity.LOW, "info"),
        (Severity.MEDIUM, "warning"),
        (Severity.HIGH, "error"),
        (Severity.CRITICAL, "critical"),
    ],
)
def test_pagerduty_severity_follows_the_work_order(
    pagerduty: PagerDutyChannel, receiver: Receiver, clock: Any, severity: Severity, pd_severity: str
) -> None:
    pagerduty.send(a_note(clock, severity=severity))

    assert receiver.requests[0][1]["payload"]["severity"] == pd_severity


def test_pagerduty_omits_links_for_a_runbook_that_is_not_a_url(
    pagerduty: PagerDutyChannel, receiver: Receiver, clock: Any
) -> None:
    pagerduty.send(a_note(clock, runbook_url="docs/runbooks/dead-lettered-run.md"))

    event = receiver.requests[0][1]
    assert "links" not in event
    assert event["payload"]["custom_details"]["runbook_url"] == "docs/runbooks/dead-lettered-run.md"


@pytest.mark.parametrize("status", [400, 429, 500])
def test_pagerduty_refusal_raises_delivery_failed_without_the_key(
    pagerduty: PagerDutyChannel, receiver: Receiver, clock: Any, status: int
) -> None:
    receiver.status = status
    receiver.body = json.dumps(
        {
            "status": "invalid event",
            "message": "Event object is invalid",
            "errors": [f"bad key {ROUTING_KEY}"],
        }
    ).encode()

    with pytest.raises(DeliveryFailed) as failed:
        pagerduty.send(a_note(clock))

    assert failed.value.channel == "pagerduty"
    assert failed.value.detail.startswith(f"HTTP {status}: Event object is invalid")
    assert ROUTING_KEY not in str(failed.value)
    assert "[redacted]" in failed.value.detail


def test_pagerduty_unreachable_raises_delivery_failed(
    pagerduty: PagerDutyChannel, clock: Any, secrets: SecretResolver
) -> None:
    channel = PagerDutyChannel(secrets, PD_PARAM, url=f"http://127.0.0.1:{refused_port()}/v2/enqueue")

    with pytest.raises(DeliveryFailed, match="CONNECTION_ERROR"):
        channel.send(a_note(clock))


def test_pagerduty_without_a_readable_routing_key_raises_delivery_failed(
    receiver: Receiver, secrets: SecretResolver, clock: Any
) -> None:
    channel = PagerDutyChannel(secrets, "/rebound/test/absent", url=f"{receiver.base}/v2/enqueue")

    with pytest.raises(DeliveryFailed, match="routing key unavailable"):
        channel.send(a_note(clock))
    assert receiver.requests == []


# --------------------------------------------------------------------------- Slack


def test_slack_posts_a_concise_block_message_to_the_webhook(
    slack: SlackChannel, receiver: Receiver, clock: Any
) -> None:
    receiver.status, receiver.body = 200, b"ok"
    note = a_note(clock, reason="payload <too> large & odd")

    detail = slack.send(note)

    path, message = receiver.requests[0]
    assert path == f"/services/T000/B000/{SLACK_TOKEN}"
    assert message["text"].startswith("[Rebound test] CRITICAL: billing dead-lettered")
    types = [block["type"] for block in message["blocks"]]
    assert types == ["header", "section", "section", "context"]
    header = message["blocks"][0]["text"]
    assert header == {"type": "plain_text", "text": "CRITICAL: billing dead-lettered"}
    fields = [f["text"] for f in message["blocks"][1]["fields"]]
    assert "*Reason*\npayload &lt;too&gt; large &amp; odd" in fields
    assert "*Attempts*\n5" in fields
    assert "<https://runbooks.example.com/dead-lettered-run|Runbook>" in message["blocks"][2]["text"]["text"]
    assert note.order.work_order_id in message["blocks"][3]["elements"][0]["text"]
    assert detail == "HTTP 200: ok"


@pytest.mark.parametrize(("status", "answer"), [(404, b"no_service"), (400, b"invalid_payload"), (500, b"")])
def test_slack_refusal_raises_delivery_failed_without_the_webhook(
    slack: SlackChannel, receiver: Receiver, clock: Any, status: int, answer: bytes
) -> None:
    receiver.status, receiver.body = status, answer

    with pytest.raises(DeliveryFailed) as failed:
        slack.send(a_note(clock))

    assert failed.value.detail == f"HTTP {status}" + (f": {answer.decode()}" if answer else "")
    assert SLACK_TOKEN not in str(failed.value)


def test_slack_resolution_through_a_webhook_is_a_new_message_naming_the_work_order(
    slack: SlackChannel, receiver: Receiver, clock: Any
) -> None:
    receiver.status, receiver.body = 200, b"ok"
    note = a_note(
        clock,
        state=WorkOrderState.RESOLVED,
        resolution=Resolution.REPLAYED,
        resolved_by="escalation",
        resolved_at=clock.now(),
        resolve_reason="run run-7 succeeded on attempt 6",
    )

    detail = slack.resolve(note, None)

    path, message = receiver.requests[0]
    assert path == f"/services/T000/B000/{SLACK_TOKEN}"
    assert message["blocks"][0]["text"]["text"] == "RESOLVED: billing (replayed)"
    assert note.order.work_order_id in message["text"] and "succeeded on attempt 6" in message["text"]
    assert detail == "HTTP 200: ok"


def test_slack_app_secret_without_a_channel_raises_delivery_failed_naming_the_secret(
    aws: boto3.session.Session, secrets: SecretResolver, clock: Any
) -> None:
    aws.client("ssm").put_parameter(
        Name="/rebound/test/slack-app", Value=json.dumps({"token": SLACK_TOKEN}), Type="SecureString"
    )

    with pytest.raises(DeliveryFailed) as failed:
        SlackChannel(secrets, "/rebound/test/slack-app").send(a_note(clock))

    assert "/rebound/test/slack-app" in failed.value.detail and '"channel"' in failed.value.detail
    assert SLACK_TOKEN not in str(failed.value)


def test_slack_app_refusal_names_slacks_error_without_the_token(
    aws: boto3.session.Session, secrets: SecretResolver, receiver: Receiver, clock: Any
) -> None:
    aws.client("ssm").put_parameter(
        Name="/rebound/test/slack-app",
        Value=json.dumps({"token": SLACK_TOKEN, "channel": "C0ALERTS"}),
        Type="SecureString",
    )
    receiver.status, receiver.body = 200, b'{"ok": false, "error": "channel_not_found"}'

    with pytest.raises(DeliveryFailed) as failed:
        SlackChannel(secrets, "/rebound/test/slack-app", api_url=f"{receiver.base}/api").send(a_note(clock))

    assert failed.value.detail == "chat.postMessage: HTTP 200, channel_not_found"
    assert receiver.requests[0][0] == "/api/chat.postMessage"
    assert SLACK_TOKEN not in str(failed.value)


def test_slack_secret_that_is_not_a_url_raises_delivery_failed(
    aws: boto3.session.Session, secrets: SecretResolver, clock: Any
) -> None:
    aws.client("ssm").put_parameter(Name="/rebound/test/slack-typo", Value=SLACK_TOKEN, Type="SecureString")

    with pytest.raises(DeliveryFailed) as failed:
        SlackChannel(secrets, "/rebound/test/slack-typo").send(a_note(clock))

    assert "does not hold an http(s) URL" in failed.value.detail
    assert SLACK_TOKEN not in str(failed.value)


def test_no_secret_reaches_a_log_record(
    pagerduty: PagerDutyChannel,
    slack: SlackChannel,
    receiver: Receiver,
    clock: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    pagerduty.send(a_note(clock))
    slack.send(a_note(clock))
    receiver.by_path["/v2/"] = (500, f"echo {ROUTING_KEY}".encode())
    receiver.by_path["/services/"] = (500, f"echo {SLACK_TOKEN}".encode())
    for channel in (pagerduty, slack):
        with pytest.raises(DeliveryFailed) as failed:
            channel.send(a_note(clock))
        logging.getLogger("test").warning("delivery failed: %s", failed.value)

    logged = caplog.text + "".join(repr(r.__dict__) for r in caplog.records)
    assert any(r.name.startswith("botocore") for r in caplog.records), "the SDK should log at DEBUG"
    assert ROUTING_KEY not in logged
    assert SLACK_TOKEN not in logged


# --------------------------------------------------------------------------- SNS


def test_sns_publishes_the_work_order_to_the_topic(
    aws: boto3.session.Session, settings: Settings, clock: Any
) -> None:
    sqs = aws.client("sqs")
    queue_url = sqs.create_queue(QueueName="alerts-inbox")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    assert settings.topic_arn
    aws.client("sns").subscribe(
        TopicArn=settings.topic_arn,
        Protocol="sqs",
        Endpoint=queue_arn,
        Attributes={"RawMessageDelivery": "true"},
    )
    note = a_note(clock)

    detail = SnsChannel(aws.client("sns"), settings.topic_arn).send(note)

    (message,) = sqs.receive_message(QueueUrl=queue_url, MessageAttributeNames=["All"])["Messages"]
    assert detail.startswith("message ")
    assert json.loads(message["Body"])["work_order_id"] == note.order.work_order_id
    assert message["MessageAttributes"]["severity"]["StringValue"] == "critical"


def test_sns_to_a_missing_topic_raises_delivery_failed(aws: boto3.session.Session, clock: Any) -> None:
    channel = SnsChannel(aws.client("sns"), "arn:aws:sns:us-east-1:123456789012:gone")

    with pytest.raises(DeliveryFailed) as failed:
        channel.send(a_note(clock))

    assert failed.value.channel == "sns"


# --------------------------------------------------------------------------- secrets


def test_secret_values_are_cached_for_their_ttl(aws: boto3.session.Session) -> None:
    ssm = aws.client("ssm")
    ssm.put_parameter(Name="/rebound/test/rotating", Value="v1", Type="SecureString")
    ticks = [0.0]
    resolver = SecretResolver(
        lambda: ssm, lambda: aws.client("secretsmanager"), ttl_s=60, monotonic=lambda: ticks[0]
    )
    assert resolver.get("/rebound/test/rotating") == "v1"
    ssm.put_parameter(Name="/rebound/test/rotating", Value="v2", Type="SecureString", Overwrite=True)

    ticks[0] = 59.0
    assert resolver.get("/rebound/test/rotating") == "v1"
    ticks[0] = 61.0
    assert resolver.get("/rebound/test/rotating") == "v2"


def test_missing_secret_is_an_operational_error_naming_the_reference(secrets: SecretResolver) -> None:
    arn = "arn:aws:secretsmanager:us-east-1:123456789012:secret:rebound/none-AbCdEf"

    with pytest.raises(OperationalError, match="rebound/none"):
        secrets.get(arn)
    with pytest.raises(OperationalError, match="/rebound/none"):
        secrets.get("/rebound/none")


# --------------------------------------------------------------------------- wiring and escalation


def test_settings_carry_the_channel_secrets_through_the_environment(settings: Settings) -> None:
    configured = settings.model_copy(
        update={"pagerduty_secret": PD_PARAM, "slack_secret": "arn:aws:secretsmanager:us-east-1:1:secret:s"}
    )

    env = settings_to_env(configured)

    assert env["REBOUND_PAGERDUTY_SECRET"] == PD_PARAM
    assert settings_from_env(env).slack_secret == configured.slack_secret
    assert "REBOUND_SLACK_SECRET" not in settings_to_env(settings)


def test_build_deps_adds_pagerduty_and_slack_when_configured(
    aws: boto3.session.Session, settings: Settings, clock: Any
) -> None:
    from rebound.wiring import build_deps

    configured = settings.model_copy(
        update={"pagerduty_secret": PD_PARAM, "slack_secret": "/rebound/test/slack"}
    )

    assert build_deps(settings, session=aws, clock=clock).notifier.names == ["sns"]
    assert build_deps(configured, session=aws, clock=clock).notifier.names == ["sns", "pagerduty", "slack"]


def test_escalation_records_each_delivery_and_retries_only_the_failed_channel(
    aws: boto3.session.Session, deps: Deps, pagerduty: PagerDutyChannel, receiver: Receiver, clock: Any
) -> None:
    from rebound.engine.escalation import Escalation

    hook = f"{receiver.base}/services/T/B/{SLACK_TOKEN}"
    aws.client("ssm").put_parameter(Name="/rebound/test/slack-hook", Value=hook, Type="SecureString")
    slack = SlackChannel(pagerduty.secrets, "/rebound/test/slack-hook", timeout_s=2)
    escalation = Escalation(dataclasses.replace(deps, notifier=ChannelNotifier([pagerduty, slack])))
    detail = {"subject": "msg#m-1", "reason": "unparseable", "severity": "high", "message_id": "m-1"}
    receiver.by_path["/services/"] = (503, b"")

    with pytest.raises(OperationalError, match="slack"):
        escalation.on_dead_lettered(detail)
    receiver.by_path["/services/"] = (200, b"ok")
    clock.advance(30)
    order = escalation.on_dead_lettered(detail)

    by_channel = {d.channel: d for d in order.deliveries}
    assert (by_channel["pagerduty"].status, by_channel["pagerduty"].attempts) == (DeliveryStatus.DELIVERED, 1)
    assert (by_channel["slack"].status, by_channel["slack"].attempts) == (DeliveryStatus.DELIVERED, 2)
    paths = [path for path, _ in receiver.requests]
    assert paths == ["/v2/enqueue", f"/services/T/B/{SLACK_TOKEN}", f"/services/T/B/{SLACK_TOKEN}"]
    assert receiver.requests[0][1]["dedup_key"] == order.work_order_id
    assert all(SLACK_TOKEN not in d.detail and ROUTING_KEY not in d.detail for d in order.deliveries)
