"""Escalation: exactly one work order per dead-lettered subject, every notification recorded."""

from __future__ import annotations

import threading

import pytest

from rebound.adapters.notify import DeliveryFailed, Notification
from rebound.domain.errors import OperationalError
from rebound.domain.run import RunState
from rebound.domain.work_order import DeliveryStatus, WorkOrderState
from rebound.engine.deps import Deps
from rebound.handlers import escalation, executor, retry_scheduler
from support import Context, bus_event, fire, outbox_events, register, sqs_event, task

pytestmark = pytest.mark.integration
RUN_ID = "job:20260307T090000Z"


def dead_letter(deps: Deps, policy: str = "default") -> dict:  # type: ignore[type-arg]
    register(
        deps, task("job", target={"type": "sim", "behavior": {"terminal_error": "BAD"}}, retry_policy=policy)
    )
    executor.lambda_handler(sqs_event(fire("job")), Context())
    failed = [d for t, d in outbox_events(deps) if t == "task.execution.failed"][-1]
    retry_scheduler.lambda_handler(sqs_event(bus_event("task.execution.failed", failed)), Context())
    return [d for t, d in outbox_events(deps) if t == "task.dead_lettered"][-1]


def linked_order(deps: Deps) -> str:
    run = deps.store.get_run(RUN_ID)
    assert run is not None and run.work_order_id is not None
    return run.work_order_id


def deliver(detail: dict, times: int = 1) -> dict:  # type: ignore[type-arg]
    return escalation.lambda_handler(sqs_event(*[bus_event("task.dead_lettered", detail)] * times), Context())


def test_a_dead_letter_opens_one_work_order_and_notifies(wired: Deps, every_event: None) -> None:
    detail = dead_letter(wired, policy="critical")
    assert deliver(detail) == {"batchItemFailures": []}
    order = wired.store.get_work_order(linked_order(wired))
    assert order is not None and order.state is WorkOrderState.OPEN
    assert order.severity.value == "critical"
    assert order.runbook_url == "docs/runbooks/critical-task-dead-lettered.md"
    assert [(d.channel, d.status) for d in order.deliveries] == [("sns", DeliveryStatus.DELIVERED)]
    run = wired.store.get_run(RUN_ID)
    assert run is not None and run.work_order_id == order.work_order_id
    assert [t for t, _ in outbox_events(wired)].count("workorder.created") == 1
    assert "work-order-opened" in [r.action for r in wired.store.audit_trail(f"run#{RUN_ID}")]


def test_duplicate_and_concurrent_deliveries_open_exactly_one_work_order(
    wired: Deps, every_event: None
) -> None:
    detail = dead_letter(wired)
    deliver(detail, times=3)
    threads = [threading.Thread(target=deliver, args=(detail,)) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    orders = wired.store.work_orders()
    assert [o.subject for o in orders] == [f"run#{RUN_ID}"]
    assert [t for t, _ in outbox_events(wired)].count("workorder.created") == 1
    assert len(orders[0].deliveries) == 1  # notified once, not once per delivery


class Flaky:
    name = "pager"

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.sent: list[str] = []

    def send(self, note: Notification) -> str:
        if self.failures:
            self.failures -= 1
            raise DeliveryFailed(self.name, "503 from the pager")
        self.sent.append(note.order.work_order_id)
        return "accepted"


def test_a_failed_notification_is_recorded_and_retried_alone(wired: Deps) -> None:
    pager = Flaky(failures=1)
    wired.notifier.channels.append(pager)
    detail = dead_letter(wired)
    first = deliver(detail)
    assert len(first["batchItemFailures"]) == 1  # SQS redelivers the event
    order = wired.store.get_work_order(linked_order(wired))
    assert order is not None
    assert {(d.channel, d.status, d.attempts) for d in order.deliveries} == {
        ("sns", DeliveryStatus.DELIVERED, 1),
        ("pager", DeliveryStatus.FAILED, 1),
    }
    assert deliver(detail) == {"batchItemFailures": []}
    order = wired.store.get_work_order(order.work_order_id)
    assert order is not None
    assert {(d.channel, d.status, d.attempts) for d in order.deliveries} == {
        ("sns", DeliveryStatus.DELIVERED, 1),
        ("pager", DeliveryStatus.DELIVERED, 2),
    }
    assert pager.sent == [order.work_order_id]
    assert wired.metrics.counts["task.notification.failure_total"] == 1


def test_a_work_order_that_cannot_be_created_is_an_error_and_a_metric(
    wired: Deps, monkeypatch: pytest.MonkeyPatch
) -> None:
    detail = dead_letter(wired)

    def broken(*args: object, **kwargs: object) -> None:
        raise OperationalError("the work orders table refused the write")

    monkeypatch.setattr(type(wired.store), "transact", broken)
    response = deliver(detail)
    assert len(response["batchItemFailures"]) == 1
    assert wired.metrics.counts["task.workorder.failure_total"] == 1


def test_an_unparseable_message_gets_a_work_order_too(wired: Deps) -> None:
    event = sqs_event("{not json")
    executor.lambda_handler(event, Context())
    [detail] = [d for t, d in outbox_events(wired) if t == "task.dead_lettered"]
    deliver(detail)
    [order] = wired.store.work_orders()
    assert order.subject.startswith("msg#") and order.run_id is None and order.error_code == "INVALID_MESSAGE"
    trail = wired.store.audit_trail(order.subject)
    assert [r.action for r in trail] == ["dead-lettered", "work-order-opened"]


def test_work_order_opens_within_the_sixty_second_target(wired: Deps) -> None:
    detail = dead_letter(wired)
    wired.clock.sleep(5)
    deliver(detail)
    order = wired.store.get_work_order(linked_order(wired))
    run = wired.store.get_run(RUN_ID)
    assert order is not None and run is not None and run.state is RunState.DEAD_LETTERED
    assert run.dead_lettered_at is not None
    assert (order.opened_at - run.dead_lettered_at).total_seconds() <= 60


def test_a_run_dead_lettered_again_while_its_work_order_is_open_adds_an_occurrence(wired: Deps) -> None:
    detail = dead_letter(wired)
    deliver(detail)
    first = linked_order(wired)
    run = wired.store.get_run(RUN_ID)
    assert run is not None and run.dead_lettered_at is not None
    replay = {"v": 1, "kind": "replay", "run_id": RUN_ID, "dead_lettered_at": detail["dead_lettered_at"]}
    wired.clock.sleep(600)  # type: ignore[attr-defined]
    executor.lambda_handler(sqs_event(replay), Context())  # the task still refuses: dead-lettered again
    failed = [d for t, d in outbox_events(wired) if t == "task.execution.failed"][-1]
    retry_scheduler.lambda_handler(sqs_event(bus_event("task.execution.failed", failed)), Context())
    second_detail = [d for t, d in outbox_events(wired) if t == "task.dead_lettered"][-1]
    assert second_detail["dead_lettered_at"] != detail["dead_lettered_at"]
    deliver(second_detail)
    assert linked_order(wired) == first  # a flapping run: no second work order while one is open
    [order] = wired.store.work_orders()
    assert order.occurrences == [second_detail["dead_lettered_at"]]

    # A leftover copy of the first replay message must not start a third budget.
    assert executor.lambda_handler(sqs_event(replay), Context()) == {"batchItemFailures": []}
    run = wired.store.get_run(RUN_ID)
    assert run is not None and run.state is RunState.DEAD_LETTERED and run.attempt == 2
