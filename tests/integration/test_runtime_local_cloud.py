"""The local cloud's own machinery: injected throttles, the message ledger, snapshots, direct reads."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from rebound.domain.task import Task
from rebound.engine.ports import RecurringSchedule
from rebound.ops.tasks import TaskOps
from rebound_local import motopatch, observe, snapshot
from rebound_local.clock import VirtualClock
from rebound_local.cloud import reset_moto
from rebound_local.instrument import MessageLedger
from rebound_local.stack import Faults, LocalStack, start_local

pytestmark = pytest.mark.integration

START = datetime(2026, 3, 7, 9, 0, tzinfo=UTC)
EVERY_MINUTE = Task.model_validate(
    {"id": "tick", "tenant": "acme", "schedule": {"cron": "* * * * *"}, "target": {"type": "sim"}}
)


@pytest.fixture
def stack_factory() -> Iterator[list[LocalStack]]:
    started: list[LocalStack] = []
    yield started
    for stack in started:
        stack.stop()
    motopatch.track_messages(None)
    reset_moto()


def start(started: list[LocalStack], **kwargs: object) -> tuple[LocalStack, VirtualClock]:
    reset_moto()
    clock = VirtualClock(START)
    stack = start_local(clock, **kwargs)  # type: ignore[arg-type]
    started.append(stack)
    return stack, clock


@pytest.mark.parametrize("transport", ["inproc", "direct"])
def test_an_injected_throttle_never_reaches_moto(stack_factory: list[LocalStack], transport: str) -> None:
    # botocore calls every before-send handler: a throttled attempt must not also be executed.
    stack, _ = start(
        stack_factory, transport=transport, faults=Faults(throttle={"scheduler:CreateSchedule": 0.5})
    )
    for n in range(4):
        assert (
            stack.deps.schedules.put_recurring(RecurringSchedule(f"s{n}", "rate(5 minutes)", "UTC", {"n": n}))
            == "created"
        )
    assert stack.throttler.injected["scheduler:CreateSchedule"] > 0


def test_the_ledger_accounts_for_every_message_and_sees_a_lost_one(stack_factory: list[LocalStack]) -> None:
    ledger = MessageLedger()
    motopatch.track_messages(ledger)
    stack, _ = start(stack_factory, transport="direct")
    ops = TaskOps(stack.deps, "test")
    ops.apply(ops.plan([EVERY_MINUTE]))
    stack.runtime.run_virtual(START + timedelta(minutes=5))
    tracked = ledger.snapshot()
    assert tracked and all(entry.status == "deleted" for entry in tracked.values())

    queue = stack.settings.queue("execution")
    stack.cloud.client("sqs").send_message(QueueUrl=queue.url, MessageBody="{}")
    with motopatch.LOCK:
        lost = stack.cloud.sqs_backend().get_queue(queue.name)._messages.pop()
    assert ledger.snapshot()[lost.id].status == "live"  # the ledger still expects it in the queue


def test_a_snapshot_restores_items_messages_and_schedules(
    stack_factory: list[LocalStack], tmp_path: Path
) -> None:
    stack, clock = start(stack_factory, transport="direct")
    ops = TaskOps(stack.deps, "test")
    ops.apply(ops.plan([EVERY_MINUTE]))
    stack.runtime.run_virtual(START + timedelta(minutes=3))
    sqs = stack.cloud.client("sqs")
    delayed = stack.settings.queue("retry")
    sqs.send_message(QueueUrl=delayed.url, MessageBody="later", DelaySeconds=600)
    runs = {r["run_id"] for r in observe.table_items(stack.cloud, stack.settings.table("runs"))}
    snapshot.save(stack.cloud, clock.now(), tmp_path)
    stack.runtime.close()
    stack.cloud.stop()
    stack_factory.clear()

    again, _ = start(stack_factory, transport="direct")
    counts = snapshot.restore(again.cloud, tmp_path)
    assert counts["items"] > 0 and counts["schedules"] == 1
    restored = {r["run_id"] for r in observe.table_items(again.cloud, again.settings.table("runs"))}
    assert restored == runs
    [depth] = [d for d in observe.queue_depths(again.cloud, again.settings) if d.logical == "retry"]
    assert (depth.delayed, depth.visible) == (1, 0)  # still waiting for its delay
    assert snapshot.saved_time(tmp_path) == START + timedelta(minutes=3)


def test_state_saved_before_the_control_table_was_renamed_restores_into_it(
    stack_factory: list[LocalStack], tmp_path: Path
) -> None:
    stack, clock = start(stack_factory, transport="direct")
    ops = TaskOps(stack.deps, "test")
    ops.apply(ops.plan([EVERY_MINUTE]))  # writes control records (the tasks epoch)
    control = stack.settings.table("control")
    before = sorted(str(i["pk"]) for i in observe.table_items(stack.cloud, control))
    path = snapshot.save(stack.cloud, clock.now(), tmp_path)
    # What a local state saved by the release before the rename holds: the same table, old name.
    saved = path.read_text().replace(f'"{control}"', f'"{control.removesuffix("-control")}-idempotency"')
    assert "-idempotency" in saved
    path.write_text(saved)
    stack.runtime.close()
    stack.cloud.stop()
    stack_factory.clear()

    again, _ = start(stack_factory, transport="direct")
    snapshot.restore(again.cloud, tmp_path)
    assert before and sorted(str(i["pk"]) for i in observe.table_items(again.cloud, control)) == before
