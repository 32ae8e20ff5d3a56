"""Hostile mode in the local runtime: timeouts, abandonment, the local fan-out, interleaving, never hanging.

Each test swaps one function's handler for a small probe (the runtime calls whatever handler its
mapping holds), so that what the runtime does around an invocation is what is under test.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from rebound_local import observe
from rebound_local.clock import VirtualClock
from rebound_local.instrument import LatencyModel, SimulatedCrash
from rebound_local.stack import Faults, LocalStack
from rebound_local.workers import RuntimeHung
from support import start_virtual

pytestmark = pytest.mark.integration

START = datetime(2026, 3, 7, 8, 59, 30, tzinfo=UTC)
Handler = Callable[[dict[str, Any], Any], Any]


def start(started: list[LocalStack], **kwargs: Any) -> tuple[LocalStack, VirtualClock]:
    return start_virtual(started, START, **kwargs)


def probe(stack: LocalStack, function: str, handler: Handler, batch_size: int | None = None) -> None:
    mapping = next(m for m in stack.runtime.mappings if m.spec.logical == function)
    mapping.handler = handler
    if batch_size is not None:
        mapping.spec = dataclasses.replace(mapping.spec, batch_size=batch_size)


def send(stack: LocalStack, queue: str, *bodies: str) -> None:
    sqs = stack.cloud.client("sqs")
    for body in bodies:
        sqs.send_message(QueueUrl=stack.settings.queue(queue).url, MessageBody=body)


def left_in(stack: LocalStack, queue: str) -> int:
    [depth] = [d for d in observe.queue_depths(stack.cloud, stack.settings) if d.logical == queue]
    return int(depth.total)


def nobody(stack: LocalStack) -> None:
    """One AWS call, through the handlers' own client."""
    stack.deps.store.get_task("nobody")


# --------------------------------------------------------------------------- handler timeouts
def test_a_handler_past_its_timeout_is_abandoned_and_its_message_comes_back(
    local_stacks: list[LocalStack],
) -> None:
    stack, clock = start(local_stacks, faults=Faults(handler_timeouts=True))
    seen: list[datetime] = []
    after: list[str] = []

    def slow(event: dict[str, Any], context: Any) -> dict[str, Any]:
        seen.append(clock.now())
        nobody(stack)
        if len(seen) == 1:
            try:
                clock.sleep(100)  # the retry scheduler's timeout is 60 s
                after.append("woke normally")
            except SimulatedCrash:
                try:
                    nobody(stack)
                    after.append("an AWS call went through")
                except SimulatedCrash:
                    after.append("AWS calls refused")
                    raise
        return {"batchItemFailures": []}

    probe(stack, "retry_scheduler", slow)
    send(stack, "retry", "m")
    stack.runtime.run_virtual(START + timedelta(minutes=2))
    assert after == ["AWS calls refused"]
    assert stack.runtime.stats.timeouts["retry_scheduler"] == 1
    assert left_in(stack, "retry") == 1  # not deleted: in flight until its visibility timeout

    stack.runtime.run_virtual(START + timedelta(minutes=7))
    assert len(seen) == 2
    assert seen[1] - seen[0] >= timedelta(seconds=6 * 60)  # the queue's visibility timeout
    assert left_in(stack, "retry") == 0


def test_by_default_a_handler_may_run_past_its_timeout(local_stacks: list[LocalStack]) -> None:
    stack, clock = start(local_stacks)
    done: list[datetime] = []

    def slow(event: dict[str, Any], context: Any) -> dict[str, Any]:
        clock.sleep(100)
        nobody(stack)
        done.append(clock.now())
        return {"batchItemFailures": []}

    probe(stack, "retry_scheduler", slow)
    send(stack, "retry", "m")
    stack.runtime.run_virtual(START + timedelta(minutes=3))
    assert done == [START + timedelta(seconds=100)]
    assert stack.runtime.stats.timeouts == {}
    assert left_in(stack, "retry") == 0


# --------------------------------------------------------------------------- the local fan-out
def test_fanned_out_children_sleep_at_the_same_time(local_stacks: list[LocalStack]) -> None:
    stack, clock = start(local_stacks)
    finished: dict[str, Any] = {}

    def nap(seconds: float) -> datetime:
        clock.sleep(seconds)
        nobody(stack)
        return clock.now()

    def batch(event: dict[str, Any], context: Any) -> dict[str, Any]:
        began = clock.now()
        finished["children"] = stack.deps.fanout.map(nap, [10.0, 20.0])
        finished["parent"] = clock.now() - began
        return {"batchItemFailures": []}

    probe(stack, "retry_scheduler", batch)
    send(stack, "retry", "m")
    stack.runtime.run_virtual(START + timedelta(minutes=1))
    assert finished["children"] == [START + timedelta(seconds=10), START + timedelta(seconds=20)]
    assert finished["parent"] == timedelta(seconds=20)  # not 30: the children overlapped
    assert left_in(stack, "retry") == 0


def test_a_crash_in_one_child_abandons_the_whole_invocation(local_stacks: list[LocalStack]) -> None:
    stack, clock = start(
        local_stacks, faults=Faults(crash_points=frozenset({"after_target"}), crash_rate=1.0)
    )
    ends: dict[int, str] = {}

    def child(index: int) -> None:
        try:
            clock.sleep(1.0 if index == 0 else 20.0)
            if index == 0:
                stack.deps.faults.reached("after_target")  # crashes, and takes the invocation with it
            nobody(stack)
            ends[index] = f"finished at {clock.now() - START}"
        except SimulatedCrash:
            ends[index] = f"crashed at {clock.now() - START}"
            raise

    def batch(event: dict[str, Any], context: Any) -> dict[str, Any]:
        stack.deps.fanout.map(child, [0, 1])
        return {"batchItemFailures": []}

    probe(stack, "retry_scheduler", batch)
    send(stack, "retry", "m")
    stack.runtime.run_virtual(START + timedelta(seconds=25))
    # The other child was woken at once: it never slept its 20 s nor made its AWS call.
    assert ends == {0: "crashed at 0:00:01", 1: "crashed at 0:00:01"}
    assert stack.runtime.stats.crashes["retry_scheduler"] == 1
    assert left_in(stack, "retry") == 1  # nothing deleted


# --------------------------------------------------------------------------- interleaving
def _interleaved(seed: int, local_stacks: list[LocalStack]) -> tuple[list[tuple[str, int]], LocalStack]:
    stack, _ = start(local_stacks, faults=Faults(seed=seed), concurrency=4)
    order: list[tuple[str, int]] = []

    def calls(event: dict[str, Any], context: Any) -> dict[str, Any]:
        me = event["Records"][0]["body"]
        for n in range(3):
            nobody(stack)
            order.append((me, n))
        return {"batchItemFailures": []}

    probe(stack, "retry_scheduler", calls, batch_size=1)
    send(stack, "retry", *[f"m{n}" for n in range(8)])
    stack.runtime.run_virtual(START + timedelta(seconds=10))
    stack.stop()
    local_stacks.remove(stack)
    return order, stack


def test_concurrent_invocations_interleave_their_aws_calls_in_an_order_the_seed_decides(
    local_stacks: list[LocalStack],
) -> None:
    first, stack = _interleaved(7, local_stacks)
    assert len(first) == 24
    assert stack.runtime.stats.peak_concurrency["retry_scheduler"] == 4
    runs = [first[i][0] for i in range(4)]
    assert len(set(runs)) > 1, "the first calls all came from one invocation: nothing interleaved"
    assert _interleaved(7, local_stacks)[0] == first
    assert _interleaved(8, local_stacks)[0] != first


def test_the_executor_cap_holds_its_mapping_to_that_many_batches(local_stacks: list[LocalStack]) -> None:
    stack, clock = start(local_stacks, executor_max_concurrency=2)

    def slow(event: dict[str, Any], context: Any) -> dict[str, Any]:
        clock.sleep(5)
        return {"batchItemFailures": []}

    probe(stack, "executor", slow, batch_size=1)
    send(stack, "execution", *[f"m{n}" for n in range(6)])
    stack.runtime.run_virtual(START + timedelta(seconds=20))
    assert stack.runtime.stats.peak_concurrency["executor"] == 2
    assert stack.runtime.stats.invocations["executor"] == 6
    assert left_in(stack, "execution") == 0


def test_aws_call_time_is_spent_on_the_in_process_transport_too(local_stacks: list[LocalStack]) -> None:
    stack, clock = start(local_stacks, transport="inproc", latency=LatencyModel(aws_call_ms=15))
    done: list[timedelta] = []

    def calls(event: dict[str, Any], context: Any) -> dict[str, Any]:
        began = clock.now()
        nobody(stack)
        nobody(stack)
        done.append(clock.now() - began)
        return {"batchItemFailures": []}

    probe(stack, "retry_scheduler", calls)
    send(stack, "retry", "m")
    stack.runtime.run_virtual(START + timedelta(seconds=5))
    assert done == [timedelta(milliseconds=30)]


# --------------------------------------------------------------------------- never hang
def test_stopping_serves_the_clock_until_a_sleeping_sweeper_returns(local_stacks: list[LocalStack]) -> None:
    # Finding 8: a sweeper still sleeping on the clock at the end kept stop() waiting for ever.
    stack, clock = start(local_stacks, latency=LatencyModel(invocation_ms=40))
    stack.runtime.run_virtual(START + timedelta(seconds=30))  # 09:00: a sweep starts and sleeps 40 ms
    assert clock.next_wakeup() == START + timedelta(seconds=30, milliseconds=40)
    stopper = threading.Thread(target=stack.stop, daemon=True)
    stopper.start()
    stopper.join(timeout=20)
    assert not stopper.is_alive(), "LocalStack.stop hung"
    local_stacks.remove(stack)
    assert stack.runtime.stats.invocations["sweeper"] == 1
    assert clock.now() == START + timedelta(seconds=30, milliseconds=40)


def test_an_invocation_sleeping_past_every_timeout_is_reported_not_waited_for(
    local_stacks: list[LocalStack],
) -> None:
    stack, clock = start(local_stacks)
    stack.runtime._sweeper = lambda event, context: clock.sleep(10 * 3600)
    stack.runtime.run_virtual(START + timedelta(seconds=30))  # 09:00: a sweep starts and sleeps 10 h
    began = time.monotonic()
    with pytest.raises(RuntimeHung) as caught:
        stack.runtime.finish()
    assert time.monotonic() - began < 10
    [running] = caught.value.running
    assert running["function"] == "sweeper" and running["since"] == "2026-03-07T09:00:00.000Z"
    assert running["deadline"] == "2026-03-07T09:04:00.000Z"
    assert "still running" in caught.value.reason
    assert clock.now() <= START + timedelta(seconds=30) + timedelta(minutes=6)
    assert stack.runtime.stats.abandoned_at_close["sweeper"] == 1  # abandoned, so stop() returns


def test_a_worker_busy_off_the_clock_fails_the_run_after_the_stall_bound(
    local_stacks: list[LocalStack],
) -> None:
    stack, _ = start(local_stacks, stall_wall_s=0.5)
    release = threading.Event()

    def stuck(event: dict[str, Any], context: Any) -> dict[str, Any]:
        release.wait(30)  # blocks the thread without telling the clock
        return {"batchItemFailures": []}

    probe(stack, "retry_scheduler", stuck)
    send(stack, "retry", "m")
    try:
        with pytest.raises(RuntimeHung) as caught:
            stack.runtime.run_virtual(START + timedelta(seconds=10))
        [running] = caught.value.running
        assert running["function"] == "retry_scheduler" and len(running["messages"]) == 1
        assert "stayed busy" in caught.value.reason
    finally:
        release.set()


# --------------------------------------------------------------------------- throttling in moto (up)
def test_with_throttling_in_moto_each_handler_attempt_is_throttled_at_most_once(
    local_stacks: list[LocalStack],
) -> None:
    faults = Faults(throttle={"dynamodb:GetItem": 0.25}, throttle_in_moto=True, seed=2)
    stack, _ = start(local_stacks, transport="inproc", faults=faults)
    client, table = stack.deps.store.client, stack.settings.table("tasks")
    retries = 0
    for n in range(8):
        answer = client.get_item(TableName=table, Key={"task_id": {"S": f"t{n}"}})
        retries += answer["ResponseMetadata"]["RetryAttempts"]
    assert stack.throttler.injected == {}  # the handlers' own session throttles nothing ...
    # ... so every retry botocore made answered a throttle from moto, and every throttle was retried.
    assert retries == stack.moto_faults.throttler.injected["dynamodb:GetItem"] > 0
