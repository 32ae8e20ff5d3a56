"""Work orders that close themselves, and every channel that follows (issue 16, part 1).

A dead-lettered run's work order resolves itself when the run succeeds after a replay (audited by
escalation, with the reason), or when an operator skips or cancels the run (with their reason).
Each resolution writes ``workorder.resolved`` in its own transaction; escalation then sends the
resolved notice on each channel the opening reached: PagerDuty ``resolve`` with the same dedup key,
Slack updating and threading the message it posted (its ``ts`` recorded), SNS a resolved notice.
Handlers run on moto; PagerDuty and Slack answer on a loopback HTTP server.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest

from rebound.adapters.notify import PagerDutyChannel, SlackChannel
from rebound.adapters.secrets import SecretResolver
from rebound.domain.run import RunState
from rebound.domain.work_order import DeliveryStatus, Resolution, WorkOrderState
from rebound.engine.deps import Deps
from rebound.engine.sweeper import Sweeper
from rebound.handlers import escalation, executor, retry_scheduler
from rebound.ops.runs import RunOps
from rebound.ops.tasks import TaskOps
from rebound.ops.workorders import WorkOrderOps
from rebound_local.clock import VirtualClock
from support import Context, bus_event, loopback_http, outbox_events, receive_event, register, sqs_event, task

pytestmark = pytest.mark.integration
RUN_ID = "job:20260307T090000Z"
ROUTING_KEY = "R0UT1NGKEY0123456789abcdefABCDEF"
SLACK_TOKEN = "xoxb-BOTTOKEN-0123456789"


@dataclass
class Receiver:
    """PagerDuty's Events API and Slack's Web API, on loopback: every request kept in order."""

    requests: list[tuple[str, dict[str, Any], str]] = field(default_factory=list)
    base: str = ""
    failing: set[str] = field(default_factory=set)
    """Paths that answer 503 until removed."""

    def answer(self, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if path in self.failing:
            return 503, {"ok": False, "error": "service_unavailable"}
        if path.startswith("/api/"):
            return 200, {
                "ok": True,
                "channel": body.get("channel"),
                "ts": f"1700000000.{len(self.requests):06d}",
            }
        return 202, {"status": "success", "dedup_key": body.get("dedup_key")}

    def calls(self, path: str) -> list[dict[str, Any]]:
        return [body for p, body, _ in self.requests if p == path]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    state = Receiver()

    def answer(path: str, raw: bytes, headers: Mapping[str, str]) -> tuple[int, bytes]:
        body = json.loads(raw)
        state.requests.append((path, body, headers.get("Authorization", "")))
        status, document = state.answer(path, body)
        return status, json.dumps(document).encode()

    with loopback_http(answer) as base:
        state.base = base
        yield state


@pytest.fixture
def channels(wired: Deps, aws: boto3.session.Session, receiver: Receiver) -> Deps:
    """SNS (already wired), PagerDuty and Slack (a bot token and a channel) on the receiver."""
    secrets = SecretResolver(lambda: aws.client("ssm"), lambda: aws.client("secretsmanager"))
    aws.client("ssm").put_parameter(Name="/rebound/test/pd", Value=ROUTING_KEY, Type="SecureString")
    slack = aws.client("secretsmanager").create_secret(
        Name="rebound/test/slack", SecretString=json.dumps({"token": SLACK_TOKEN, "channel": "C0ALERTS"})
    )["ARN"]
    wired.notifier.channels.extend(
        [
            PagerDutyChannel(secrets, "/rebound/test/pd", url=f"{receiver.base}/v2/enqueue", timeout_s=2),
            SlackChannel(secrets, slack, api_url=f"{receiver.base}/api", timeout_s=2),
        ]
    )
    return wired


def last(deps: Deps, detail_type: str) -> dict[str, Any]:
    return [d for t, d in outbox_events(deps) if t == detail_type][-1]


def escalate(detail_type: str, detail: dict[str, Any]) -> dict[str, Any]:
    return escalation.lambda_handler(sqs_event(bus_event(detail_type, detail)), Context())


def dead_letter_and_open(deps: Deps, behavior: dict[str, Any] | None = None) -> str:
    """A task that fails its first attempt (or as ``behavior`` says), with one attempt a budget:
    dead-lettered, work order open."""
    behavior = behavior or {"fail_first": 1}
    register(
        deps, task("job", target={"type": "sim", "behavior": behavior}, retry_policy={"max_attempts": 1})
    )
    executor.lambda_handler(
        sqs_event({"v": 1, "kind": "fire", "task_id": "job", "scheduled_time": "2026-03-07T09:00:00Z"}),
        Context(),
    )
    retry_scheduler.lambda_handler(
        sqs_event(bus_event("task.execution.failed", last(deps, "task.execution.failed"))), Context()
    )
    assert escalate("task.dead_lettered", last(deps, "task.dead_lettered")) == {"batchItemFailures": []}
    run = deps.store.get_run(RUN_ID)
    assert run is not None and run.state is RunState.DEAD_LETTERED and run.work_order_id
    return run.work_order_id


def replay_and_run(deps: Deps) -> None:
    RunOps(deps, actor="alice").retry(RUN_ID, reason="dependency fixed")
    executor.lambda_handler(receive_event(deps), Context())


def test_a_run_that_succeeds_on_replay_resolves_its_work_order_and_every_channel_follows(
    channels: Deps, receiver: Receiver
) -> None:
    order_id = dead_letter_and_open(channels)
    [trigger] = receiver.calls("/v2/enqueue")
    assert trigger["event_action"] == "trigger" and trigger["dedup_key"] == order_id
    opened = channels.store.get_work_order(order_id)
    assert opened is not None
    slack_post = next(d for d in opened.deliveries if d.channel == "slack")
    assert slack_post.ref is not None and slack_post.ref.startswith("C0ALERTS/1700000000.")

    channels.clock.sleep(120)  # type: ignore[attr-defined]
    replay_and_run(channels)
    run = channels.store.get_run(RUN_ID)
    assert run is not None and run.state is RunState.SUCCEEDED and run.attempt == 2
    assert channels.metrics.counts["task.retry.recovered_total"] == 1  # type: ignore[attr-defined]

    # The success carried task.recovered in its own transaction; escalation resolves the order.
    recovered = last(channels, "task.recovered")
    assert recovered["work_order_id"] == order_id and recovered["attempt"] == 2
    assert escalate("task.recovered", recovered) == {"batchItemFailures": []}
    order = channels.store.get_work_order(order_id)
    assert order is not None and order.state is WorkOrderState.RESOLVED
    assert order.resolution is Resolution.REPLAYED and order.resolved_by == "escalation"
    assert order.resolve_reason is not None and "succeeded on attempt 2" in order.resolve_reason
    record = channels.store.audit_trail(f"workorder#{order_id}")[-1]
    assert (record.actor, record.action) == ("escalation", "resolved")
    assert "succeeded on attempt 2" in record.evidence["reason"]
    assert channels.metrics.counts["workorder.resolved_total"] == 1  # type: ignore[attr-defined]
    assert channels.metrics.observations["workorder.time_to_resolve_s"] == [  # type: ignore[attr-defined]
        (order.resolved_at - order.opened_at).total_seconds()  # type: ignore[operator]
    ]

    # The resolution carried workorder.resolved; escalation tells every channel.
    resolved = last(channels, "workorder.resolved")
    assert resolved["resolution"] == "replayed" and resolved["time_to_resolve_s"] > 0
    assert escalate("workorder.resolved", resolved) == {"batchItemFailures": []}
    resolve = receiver.calls("/v2/enqueue")[-1]
    assert resolve == {
        "routing_key": ROUTING_KEY,
        "event_action": "resolve",
        "dedup_key": order_id,
        "client": "Rebound",
    }
    channel, ts = slack_post.ref.split("/")
    [update] = receiver.calls("/api/chat.update")
    assert (update["channel"], update["ts"]) == (channel, ts) and "RESOLVED" in update["text"]
    thread = [c for c in receiver.calls("/api/chat.postMessage") if c.get("thread_ts")]
    assert [(c["channel"], c["thread_ts"]) for c in thread] == [(channel, ts)]
    assert {auth for path, _, auth in receiver.requests if path.startswith("/api/")} == {
        f"Bearer {SLACK_TOKEN}"
    }
    order = channels.store.get_work_order(order_id)
    assert order is not None
    assert {(d.channel, d.status) for d in order.resolve_deliveries} == {
        ("sns", DeliveryStatus.DELIVERED),
        ("pagerduty", DeliveryStatus.DELIVERED),
        ("slack", DeliveryStatus.DELIVERED),
    }

    # Delivered again (at least once): nothing is resolved or sent twice.
    before = len(receiver.requests)
    escalate("task.recovered", recovered)
    escalate("workorder.resolved", resolved)
    assert len(receiver.requests) == before
    assert channels.metrics.counts["workorder.resolved_total"] == 1  # type: ignore[attr-defined]
    assert [t for t, _ in outbox_events(channels)].count("workorder.resolved") == 1


def test_the_sns_resolved_notice_names_the_work_order_and_the_resolution(
    wired: Deps, aws: boto3.session.Session
) -> None:
    sqs = aws.client("sqs")
    inbox = sqs.create_queue(QueueName="alerts-inbox")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=inbox, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    aws.client("sns").subscribe(TopicArn=wired.settings.topic_arn, Protocol="sqs", Endpoint=arn)
    order_id = dead_letter_and_open(wired)
    RunOps(wired, actor="alice").skip(RUN_ID, reason="superseded by the 09:05 run")
    escalate("workorder.resolved", last(wired, "workorder.resolved"))
    notices = [
        json.loads(json.loads(m["Body"])["Message"])
        for m in sqs.receive_message(QueueUrl=inbox, MaxNumberOfMessages=10)["Messages"]
    ]
    resolved = [n for n in notices if n.get("state") == "resolved"]
    assert [(n["work_order_id"], n["resolution"], n["resolved_by"]) for n in resolved] == [
        (order_id, "skipped", "alice")
    ]
    assert "superseded by the 09:05 run" in resolved[0]["reason"]


def test_skipping_a_run_resolves_its_work_order_with_the_operators_reason(wired: Deps) -> None:
    order_id = dead_letter_and_open(wired)
    RunOps(wired, actor="alice").skip(RUN_ID, reason="superseded by the 09:05 run")
    order = wired.store.get_work_order(order_id)
    assert order is not None and order.state is WorkOrderState.RESOLVED
    assert (order.resolution, order.resolved_by) == (Resolution.SKIPPED, "alice")
    assert order.resolve_reason is not None and "superseded by the 09:05 run" in order.resolve_reason
    assert last(wired, "workorder.resolved")["resolution"] == "skipped"
    assert wired.metrics.counts["workorder.resolved_total"] == 1  # type: ignore[attr-defined]


def test_an_operator_resolution_notifies_too(wired: Deps) -> None:
    order_id = dead_letter_and_open(wired)
    WorkOrderOps(wired, actor="bob").resolve(order_id, Resolution.FIXED, note="booked by hand")
    resolved = last(wired, "workorder.resolved")
    assert (resolved["resolved_by"], resolved["reason"]) == ("bob", "booked by hand")
    escalate("workorder.resolved", resolved)
    order = wired.store.get_work_order(order_id)
    assert order is not None
    assert [(d.channel, d.status) for d in order.resolve_deliveries] == [("sns", DeliveryStatus.DELIVERED)]


def test_a_failed_resolved_notice_is_retried_alone(channels: Deps, receiver: Receiver) -> None:
    order_id = dead_letter_and_open(channels)
    RunOps(channels, actor="alice").cancel(RUN_ID, reason="task retired")
    resolved = last(channels, "workorder.resolved")
    receiver.failing.add("/v2/enqueue")
    assert len(escalate("workorder.resolved", resolved)["batchItemFailures"]) == 1
    order = channels.store.get_work_order(order_id)
    assert order is not None
    assert {d.channel: d.status for d in order.resolve_deliveries} == {
        "sns": DeliveryStatus.DELIVERED,
        "pagerduty": DeliveryStatus.FAILED,
        "slack": DeliveryStatus.DELIVERED,
    }
    receiver.failing.clear()
    slack_calls = len([p for p, _, _ in receiver.requests if p.startswith("/api/")])
    assert escalate("workorder.resolved", resolved) == {"batchItemFailures": []}
    order = channels.store.get_work_order(order_id)
    assert order is not None
    assert {(d.channel, d.status, d.attempts) for d in order.resolve_deliveries} == {
        ("sns", DeliveryStatus.DELIVERED, 1),
        ("pagerduty", DeliveryStatus.DELIVERED, 2),
        ("slack", DeliveryStatus.DELIVERED, 1),
    }
    assert len([p for p, _, _ in receiver.requests if p.startswith("/api/")]) == slack_calls


def test_a_recovery_and_a_resolution_escalation_gave_up_on_are_finished_by_the_sweeper(
    wired: Deps,
) -> None:
    """A ``task.recovered`` or ``workorder.resolved`` that escalation failed on until SQS moved it
    to the control DLQ used to stay there for an operator: the order open, or a channel never told."""
    from rebound.engine.sweeper import SweepReport

    order_id = dead_letter_and_open(wired)
    wired.clock.sleep(120)  # type: ignore[attr-defined]
    replay_and_run(wired)
    recovered = last(wired, "task.recovered")
    wired.queues.send(
        "control_dlq", {"detail-type": "task.recovered", "source": "io.rebound", "detail": recovered}
    )
    report = SweepReport()
    Sweeper(wired).work_control_dlq(report)
    order = wired.store.get_work_order(order_id)
    assert order is not None and order.state is WorkOrderState.RESOLVED
    assert (order.resolution, order.resolved_by) == (Resolution.REPLAYED, "sweeper")
    [record] = [r for r in wired.store.audit_trail(f"workorder#{order_id}") if r.action == "resolved"]
    assert record.actor == "sweeper" and "succeeded on attempt 2" in record.evidence["reason"]
    assert order.resolve_deliveries == [] and len(report.control_handled) == 1

    resolved = last(wired, "workorder.resolved")
    wired.queues.send(
        "control_dlq", {"detail-type": "workorder.resolved", "source": "io.rebound", "detail": resolved}
    )
    Sweeper(wired).work_control_dlq(report)
    order = wired.store.get_work_order(order_id)
    assert order is not None
    assert [(d.channel, d.status) for d in order.resolve_deliveries] == [("sns", DeliveryStatus.DELIVERED)]
    assert len(report.control_handled) == 2 and wired.queues.depth("control_dlq") == 0


def test_a_flapping_run_adds_an_occurrence_to_its_open_work_order(wired: Deps, every_event: None) -> None:
    dead_letter_and_open(wired, {"always_fail": True})
    first = last(wired, "task.dead_lettered")
    for _ in range(2):  # replayed, dead-lettered again, while the order is open
        wired.clock.sleep(300)  # type: ignore[attr-defined]
        replay_and_run(wired)
        retry_scheduler.lambda_handler(
            sqs_event(bus_event("task.execution.failed", last(wired, "task.execution.failed"))), Context()
        )
        again = last(wired, "task.dead_lettered")
        assert again["dead_lettered_at"] != first["dead_lettered_at"]
        escalate("task.dead_lettered", again)
        escalate("task.dead_lettered", again)  # a duplicate delivery adds nothing
    [order] = wired.store.work_orders()
    assert len(order.occurrences) == 2 and order.attempts == 3
    assert [t for t, _ in outbox_events(wired)].count("workorder.created") == 1
    actions = [r.action for r in wired.store.audit_trail(f"workorder#{order.work_order_id}")]
    assert actions.count("occurred-again") == 2
    assert len(order.deliveries) == 1  # the open alert stands; it is not sent again


def test_a_run_dead_lettered_after_its_work_order_was_resolved_opens_a_new_one(wired: Deps) -> None:
    first = dead_letter_and_open(wired, {"always_fail": True})
    wired.clock.sleep(300)  # type: ignore[attr-defined]
    RunOps(wired, actor="alice").retry(RUN_ID, reason="try once more")
    WorkOrderOps(wired, actor="alice").resolve(first, Resolution.REPLAYED, note="replayed")
    executor.lambda_handler(receive_event(wired), Context())
    retry_scheduler.lambda_handler(
        sqs_event(bus_event("task.execution.failed", last(wired, "task.execution.failed"))), Context()
    )
    escalate("task.dead_lettered", last(wired, "task.dead_lettered"))
    orders = {o.work_order_id: o.state for o in wired.store.work_orders()}
    assert orders[first] is WorkOrderState.RESOLVED
    assert sorted(orders.values()) == [WorkOrderState.OPEN, WorkOrderState.RESOLVED]


def test_the_sweeper_publishes_manual_recovery_completion_every_five_minutes(wired: Deps) -> None:
    order_id = dead_letter_and_open(wired)
    sweeper = Sweeper(wired)
    first = sweeper.sweep(scan_dlq=False, ledger=False)
    assert first.completion_rate == 0.0  # one opened, none resolved
    assert sweeper.sweep(scan_dlq=False, ledger=False).completion_rate is None  # same period: not again
    WorkOrderOps(wired, actor="bob").resolve(order_id, Resolution.FIXED, note="done")
    wired.clock.sleep(300)  # type: ignore[attr-defined]
    assert sweeper.sweep(scan_dlq=False, ledger=False).completion_rate == 100.0
    assert wired.metrics.observations["workorder.completion_rate"] == [0.0, 100.0]  # type: ignore[attr-defined]
    wired.clock.sleep(8 * 86400)  # type: ignore[attr-defined]
    assert sweeper.sweep(scan_dlq=False, ledger=False).completion_rate is None  # nothing in 7 days


# --------------------------------------------------------------------------- the whole loop, locally


@pytest.fixture
def local_stack() -> Iterator[Any]:
    from rebound_local.cloud import reset_moto
    from rebound_local.stack import start_local

    reset_moto()
    clock = VirtualClock(LOCAL_START)
    stack = start_local(clock, transport="direct")
    yield stack
    stack.stop()
    reset_moto()


LOCAL_START = datetime(2026, 3, 7, 8, 58, tzinfo=UTC)


def test_on_the_local_cloud_a_replayed_run_resolves_its_work_order_through_the_bus(local_stack: Any) -> None:
    """Fire, three failed attempts, dead letter, work order, operator replay, success: the rules
    carry ``task.recovered`` and ``workorder.resolved`` to escalation with no handler called by hand."""
    deps = local_stack.deps
    ops = TaskOps(deps, "test")
    flaky = task(
        "flaky", schedule={"cron": "0 9 * * *"}, target={"type": "sim", "behavior": {"fail_first": 3}}
    )
    ops.apply(ops.plan([flaky]))
    local_stack.runtime.run_virtual(LOCAL_START + timedelta(minutes=20))
    run_id = "flaky:20260307T090000Z"
    run = deps.store.get_run(run_id)
    assert run is not None and run.state is RunState.DEAD_LETTERED and run.work_order_id
    order = deps.store.get_work_order(run.work_order_id)
    assert order is not None and order.state is WorkOrderState.OPEN

    RunOps(deps, actor="alice").retry(run_id, reason="dependency back")
    local_stack.runtime.run_virtual(LOCAL_START + timedelta(minutes=25))
    run = deps.store.get_run(run_id)
    assert run is not None and run.state is RunState.SUCCEEDED and run.attempt == 4
    order = deps.store.get_work_order(order.work_order_id)
    assert order is not None and order.state is WorkOrderState.RESOLVED
    assert (order.resolution, order.resolved_by) == (Resolution.REPLAYED, "escalation")
    assert [(d.channel, d.status) for d in order.resolve_deliveries] == [("sns", DeliveryStatus.DELIVERED)]
    assert [o.work_order_id for o in deps.store.work_orders()] == [order.work_order_id]
