"""The crash path end to end on the local runtime: an execution message the executor dies on every
time is moved to the DLQ by SQS's own redrive policy, then found there by the sweeper and escalated
once, with its work order and notification, while the message stays in the DLQ for redrive."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from rebound.domain.run import RunState
from rebound.domain.work_order import DeliveryStatus
from rebound.engine import telemetry as m
from rebound.engine.executor import HOLD_PAST_INVOCATION_S
from rebound.engine.executor import intake as executor_engine
from rebound.engine.health.report import Thresholds
from rebound.resources import EXECUTOR_TIMEOUT_S, MAX_RECEIVE_COUNT
from rebound_local.clock import VirtualClock
from rebound_local.cloud import reset_moto
from rebound_local.instrument import SimulatedCrash
from rebound_local.stack import LocalStack, start_local
from support import fire, queue_messages, register, task

pytestmark = pytest.mark.e2e
START = datetime(2026, 3, 7, 8, 59, tzinfo=UTC)
RUN_ID = "job:20260307T090000Z"
POISON = json.dumps(fire("job"))
BACK_S = EXECUTOR_TIMEOUT_S + HOLD_PAST_INVOCATION_S
"""How long after each receive the message comes back: the executor keeps its batch invisible
until just after the invocation can end (``rebound.engine.executor.delivery.hold``)."""


@pytest.fixture
def stack(monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalStack]:
    reset_moto()
    local = start_local(VirtualClock(START), transport="inproc")
    real_parse = executor_engine.parse_execution_message

    def crash_on_poison(body: str) -> Any:
        if body == POISON:
            # The invocation dies while reading this message, before any run exists: no cleanup,
            # no response, so the event source mapping deletes nothing.
            raise SimulatedCrash("poison message")
        return real_parse(body)

    # Only the executor's reference: the sweeper parses the same body with its own, unharmed.
    monkeypatch.setattr(executor_engine, "parse_execution_message", crash_on_poison)
    yield local
    local.stop()
    reset_moto()


def test_a_message_the_executor_always_dies_on_is_redriven_by_sqs_and_escalated_once(
    stack: LocalStack,
) -> None:
    deps = stack.deps
    # A task that fires once a year: nothing but the poison message goes through the executor.
    register(deps, task("job", schedule={"cron": "0 0 1 1 *"}))
    sqs = stack.cloud.client("sqs")
    sent = sqs.send_message(QueueUrl=stack.settings.queue("execution").url, MessageBody=POISON)["MessageId"]

    # Each receive crashes the executor; the message comes back once that invocation could have
    # ended. Just before the last one, nothing has been escalated and the message is still in the queue.
    almost = START + timedelta(seconds=(MAX_RECEIVE_COUNT - 1) * BACK_S - 60)
    stack.runtime.run_virtual(almost)
    assert stack.runtime.stats.crashes["executor"] == MAX_RECEIVE_COUNT - 1
    assert [msg["id"] for msg in queue_messages(deps, "execution")] == [sent]
    assert queue_messages(deps, "dlq") == []
    assert deps.store.get_run(RUN_ID) is None  # it never got as far as creating the run

    # The fifth receive crashes too; the next receive finds maxReceiveCount exceeded and SQS
    # moves the message itself; the sweeper's next pass finds it there.
    moved = START + timedelta(seconds=MAX_RECEIVE_COUNT * BACK_S)
    stack.runtime.run_virtual(moved + timedelta(minutes=3))
    assert stack.runtime.stats.crashes["executor"] == MAX_RECEIVE_COUNT
    assert queue_messages(deps, "execution") == []

    # Still in the DLQ, untouched, for a redrive; SQS put it there, so it has no reason attribute.
    [dlq] = queue_messages(deps, "dlq")
    assert dlq["id"] == sent and dlq["raw"] == POISON
    assert "reason" not in dlq["attributes"]

    # The run the message would have created is recorded and dead-lettered by the redrive path.
    run = deps.store.get_run(RUN_ID)
    assert run is not None and run.state is RunState.DEAD_LETTERED
    assert run.dead_letter_reason == "max_receive_count_exceeded"
    assert run.last_error_code == "RECEIVE_COUNT_EXCEEDED"
    assert run.dlq_message_id == sent
    assert run.attempt == 0 and stack.targets.calls == []  # the target was never reached
    trail = deps.store.audit_trail(f"run#{RUN_ID}")
    [dead] = [r for r in trail if r.action == "dead-lettered"]
    assert (
        dead.evidence["path"] == "redrive_policy" and dead.evidence["reason"] == "max_receive_count_exceeded"
    )
    assert dead.at >= moved  # escalated after the move, not before

    # Exactly one work order, linked to the run, with a delivered notification recorded on it.
    [order] = deps.store.work_orders()
    assert order.run_id == RUN_ID and order.subject == f"run#{RUN_ID}"
    assert run.work_order_id == order.work_order_id
    assert order.reason == "max_receive_count_exceeded" and order.message_id == sent
    assert [(d.channel, d.status) for d in order.deliveries] == [("sns", DeliveryStatus.DELIVERED)]
    assert [r.action for r in trail][-1] == "work-order-opened"

    # Later sweeps read the DLQ again and escalate nothing more.
    stack.runtime.run_virtual(moved + timedelta(minutes=25))
    runs_orders = [o for o in deps.store.work_orders() if not o.subject.startswith("health#")]
    assert [o.work_order_id for o in runs_orders] == [order.work_order_id]
    # Nobody acknowledged it: the retry-health report (every five minutes) finds it past its
    # acknowledgement SLA and keeps one work order of its own for that, not one more for the run.
    [health] = [o for o in deps.store.work_orders() if o.subject.startswith("health#")]
    assert health.subject == "health#acknowledgement_gaps"
    sla_out = order.opened_at + Thresholds().ack_sla[order.severity]
    assert sla_out < health.opened_at <= sla_out + timedelta(minutes=5)
    assert [msg["id"] for msg in queue_messages(deps, "dlq")] == [sent]
    assert stack.metrics.counts[m.RETRY_DLQ] == 1
    assert stack.metrics.counts[m.WORKORDER_OPENED] == 2  # the run's, and the health finding's
    assert stack.metrics.counts[m.RETRY_ESCALATED] == 1
