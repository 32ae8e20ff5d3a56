"""The local fan-out and the clocks' side of abandonment, without AWS.

(Under a ``VirtualClock`` and inside the runtime, ``tests/integration/test_hostile_runtime.py``.)
"""

from __future__ import annotations

import random
import threading
import time
from datetime import UTC, datetime, timedelta

import pytest

from rebound_local.clock import ScaledClock
from rebound_local.fanout import LocalFanout
from rebound_local.invocations import Invocation, Lane, SimulatedCrash, working_for

pytestmark = pytest.mark.unit

START = datetime(2026, 3, 7, 9, 0, tzinfo=UTC)


def lane() -> Lane:
    return Lane(Invocation("executor", START), random.Random(1))


def test_a_scaled_clock_sleeper_wakes_to_crash_when_its_invocation_is_abandoned() -> None:
    clock = ScaledClock(START, scale=1.0)
    mine = lane()
    outcome: list[str] = []

    def sleeper() -> None:
        with working_for(mine):
            try:
                clock.sleep(30)
                outcome.append("slept")
            except SimulatedCrash:
                outcome.append("crashed")

    thread = threading.Thread(target=sleeper)
    began = time.monotonic()
    thread.start()
    time.sleep(0.05)
    mine.invocation.abandon("timeout")
    thread.join(timeout=5)
    assert outcome == ["crashed"]
    assert time.monotonic() - began < 5
    with working_for(mine), pytest.raises(SimulatedCrash):
        clock.sleep(0)  # an abandoned invocation cannot even start a sleep


def test_a_scaled_clock_timer_runs_once_its_time_comes_unless_cancelled() -> None:
    clock = ScaledClock(START, scale=1000.0)
    fired = threading.Event()
    dropped = threading.Event()
    clock.call_at(clock.now() + timedelta(seconds=10), fired.set)  # 10 ms of wall time
    clock.call_at(clock.now() + timedelta(seconds=10), dropped.set).cancel()
    assert fired.wait(timeout=5)
    time.sleep(0.05)
    assert not dropped.is_set()


def test_on_a_scaled_clock_the_children_run_at_once_and_results_keep_their_order() -> None:
    clock = ScaledClock(START, scale=100.0)
    fanout = LocalFanout(clock)
    began = time.monotonic()

    def nap(seconds: float) -> float:
        clock.sleep(seconds)
        return seconds

    assert fanout.map(nap, [20.0, 10.0, 5.0]) == [20.0, 10.0, 5.0]
    assert time.monotonic() - began < 0.3  # 0.2 s for the longest, not 0.35 s in a row


def test_the_first_error_in_item_order_is_raised_after_every_child_finished() -> None:
    fanout = LocalFanout(ScaledClock(START, scale=100.0))
    finished: list[int] = []

    def work(index: int) -> int:
        if index == 0:
            time.sleep(0.05)
            raise ValueError("first item")
        if index == 1:
            raise KeyError("second item")
        time.sleep(0.1)
        finished.append(index)
        return index

    with pytest.raises(ValueError, match="first item"):
        fanout.map(work, [0, 1, 2])
    assert finished == [2]


def test_children_work_for_the_parents_invocation_and_a_crash_abandons_it() -> None:
    clock = ScaledClock(START, scale=100.0)
    fanout = LocalFanout(clock)
    parent = lane()
    seen: list[str] = []

    def child(index: int) -> None:
        if index == 0:
            raise SimulatedCrash("a crash point")
        try:
            clock.sleep(1000)  # 10 s of wall time, cut short
            seen.append("slept")
        except SimulatedCrash:
            seen.append("woken to crash")
            raise

    began = time.monotonic()
    with working_for(parent), pytest.raises(SimulatedCrash):
        fanout.map(child, [0, 1])
    assert seen == ["woken to crash"]
    assert parent.invocation.reason == "crash"
    assert time.monotonic() - began < 5.0  # woken, not slept out (a loaded machine takes a second)


def test_a_cli_reads_the_clock_local_up_publishes_as_the_cloud_reads_it() -> None:
    """At a time scale of 60, a CLI that missed the cloud's time by a tenth of a second would be
    six seconds off (a health check's "last ran -4s ago")."""
    from rebound_cli.context import CloudClock
    from rebound_local.clock import ScaledClock

    cloud = ScaledClock(scale=60)
    anchor = cloud.anchor()
    read = CloudClock.from_document(anchor)
    assert read.origin_monotonic is not None, "a process of this machine's boot reads its monotonic clock"
    assert abs((read.now() - cloud.now()).total_seconds()) < 0.5
    elsewhere = CloudClock.from_document({**anchor, "boot_id": "another-machine"})
    assert elsewhere.origin_monotonic is None  # then the wall clock
    assert abs((elsewhere.now() - cloud.now()).total_seconds()) < 3
