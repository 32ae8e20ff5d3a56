"""The simulator's latency model: time spent by AWS calls, Lambda scaling ramps, Scheduler's quota."""

from __future__ import annotations

import random
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from rebound.engine.ports import RecurringSchedule
from rebound_local import motopatch
from rebound_local.clock import VirtualClock
from rebound_local.cloud import reset_moto
from rebound_local.event_sources import esm_allowed, esm_next_step
from rebound_local.instrument import LatencyModel, mark_worker
from rebound_local.scheduler import random_uuid
from rebound_local.stack import LocalStack, start_local

pytestmark = pytest.mark.integration

START = datetime(2026, 3, 7, 8, 59, 30, tzinfo=UTC)
HOUR = datetime(2026, 3, 7, 9, 0, tzinfo=UTC)
RAMP = LatencyModel(esm_start_concurrency=5, esm_scale_per_minute=300)


@pytest.fixture
def stacks() -> Iterator[list[LocalStack]]:
    started: list[LocalStack] = []
    yield started
    for stack in started:
        stack.stop()
    reset_moto()


def start(started: list[LocalStack], latency: LatencyModel) -> tuple[LocalStack, VirtualClock]:
    reset_moto()
    motopatch.install()
    clock = VirtualClock(START)
    stack = start_local(clock, transport="direct", latency=latency)
    started.append(stack)
    return stack, clock


# --------------------------------------------------------------------------- the SQS scaling ramp
def test_without_a_ramp_a_mapping_may_use_its_maximum_at_once() -> None:
    assert esm_allowed(LatencyModel(), 100, None, HOUR) == 100
    assert esm_next_step(LatencyModel(), 100, HOUR, HOUR) is None


def test_the_ramp_starts_at_five_and_adds_three_hundred_a_minute_up_to_the_maximum() -> None:
    assert esm_allowed(RAMP, 100, None, HOUR) == 5  # quiet queue
    assert esm_allowed(RAMP, 3, None, HOUR) == 3  # never above the function's maximum
    assert esm_allowed(RAMP, 100, HOUR, HOUR) == 5
    assert esm_allowed(RAMP, 100, HOUR, HOUR + timedelta(seconds=1)) == 10
    assert esm_allowed(RAMP, 100, HOUR, HOUR + timedelta(seconds=12)) == 65
    assert esm_allowed(RAMP, 100, HOUR, HOUR + timedelta(seconds=60)) == 100


def test_the_next_ramp_step_is_when_one_more_batch_is_allowed() -> None:
    step = esm_next_step(RAMP, 100, HOUR, HOUR)
    assert step == HOUR + timedelta(seconds=0.2)  # 300 a minute: one every 0.2 s
    assert esm_allowed(RAMP, 100, HOUR, step) == 6
    assert esm_allowed(RAMP, 100, HOUR, step - timedelta(milliseconds=1)) == 5
    assert esm_next_step(RAMP, 100, HOUR, HOUR + timedelta(minutes=5)) is None  # at the maximum
    assert esm_next_step(RAMP, 100, None, HOUR) is None  # no backlog, nothing to wait for


# --------------------------------------------------------------------------- Scheduler's quota
def test_fires_beyond_the_schedulers_quota_wait_for_the_next_second(stacks: list[LocalStack]) -> None:
    stack, clock = start(stacks, LatencyModel(scheduler_invocations_per_s=100))
    for n in range(250):
        stack.deps.schedules.put_recurring(
            RecurringSchedule(f"hourly-{n:03d}", "cron(0 * * * ? *)", "UTC", {"n": n})
        )
    engine = stack.runtime.scheduler

    delivered = []
    for second in range(3):
        now = HOUR + timedelta(seconds=second)
        clock.advance_to(now)
        due = engine.next_due()
        assert due is not None and due <= now  # due (or overdue) and the quota is fresh
        delivered.append(engine.fire_due())
        if second < 2:
            assert engine.fire_due() == 0  # this second's quota is spent ...
            assert engine.next_due() == now + timedelta(seconds=1)  # ... so the rest wait a second
    assert delivered == [100, 100, 50]
    assert engine.next_due() == HOUR + timedelta(hours=1)
    queue = stack.cloud.sqs_backend().get_queue(stack.settings.queue("execution").name)
    assert len(queue._messages) == 250


def test_without_a_quota_every_due_schedule_fires_at_once(stacks: list[LocalStack]) -> None:
    stack, clock = start(stacks, LatencyModel())
    for n in range(250):
        stack.deps.schedules.put_recurring(
            RecurringSchedule(f"hourly-{n:03d}", "cron(0 * * * ? *)", "UTC", {"n": n})
        )
    clock.advance_to(HOUR)
    assert stack.runtime.scheduler.fire_due() == 250


# --------------------------------------------------------------------------- time spent by AWS calls
def test_an_aws_call_spends_virtual_time_in_a_worker_and_none_in_the_coordinator(
    stacks: list[LocalStack],
) -> None:
    stack, clock = start(stacks, LatencyModel(aws_call_ms=15))
    store = stack.deps.store

    store.get_task("nobody")  # the coordinator's thread: no time passes, nothing waits
    assert clock.now() == START
    assert clock.next_wakeup() is None

    finished: list[datetime] = []

    def worker() -> None:
        mark_worker(True)
        try:
            store.get_task("nobody")
            store.get_task("nobody")
            finished.append(clock.now())
        finally:
            mark_worker(False)
            clock.end()

    clock.begin()
    thread = threading.Thread(target=worker)
    thread.start()
    for _ in range(2):
        assert clock.wait_idle(timeout=5)
        wake = clock.next_wakeup()
        assert wake is not None
        clock.advance_to(wake)
    assert clock.wait_idle(timeout=5)
    thread.join(timeout=5)
    assert finished == [START + timedelta(milliseconds=30)]


def test_request_and_execution_ids_are_version_4_uuids_drawn_from_the_seed() -> None:
    drawn = [random_uuid(random.Random("7:ids")) for _ in range(2)]
    assert drawn[0] == drawn[1]  # the same seed, the same id
    more = random.Random("7:ids")
    ids = {random_uuid(more) for _ in range(1000)}
    assert len(ids) == 1000
    assert all(i.version == 4 and i.variant == uuid.RFC_4122 for i in ids)
