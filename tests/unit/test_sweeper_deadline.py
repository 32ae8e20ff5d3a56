"""A sweep starts no step it has no time left for: the Lambda timeout never cuts one off half-way."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from fakes import memory_deps

from rebound.engine.sweeper import STEP_MARGIN_S, Sweeper


def test_a_sweep_with_time_left_runs_every_step() -> None:
    world = memory_deps()
    report = Sweeper(world.deps, remaining_s=lambda: 300.0).sweep()
    assert report.out_of_time == [] and report.failures == []


def test_steps_past_the_margin_are_left_to_the_next_sweep_and_named() -> None:
    world = memory_deps()
    left = iter([300.0, 300.0, 300.0])  # three steps start, then the clock runs out

    report = Sweeper(world.deps, remaining_s=lambda: next(left, STEP_MARGIN_S - 1)).sweep()

    # queue, running and leases started; every later step is named, none ran half-way
    assert report.out_of_time[:2] == ["failures", "dispatches"]
    assert "workstreams" in report.out_of_time
    assert not {"queue", "running", "leases"} & set(report.out_of_time)
    assert report.failures == []


def test_no_time_at_all_starts_nothing() -> None:
    world = memory_deps()
    report = Sweeper(world.deps, remaining_s=lambda: 0.0).sweep()
    assert report.out_of_time[0] == "queue" and "workstreams" in report.out_of_time
    assert report.total() == 0 and not report.periodic


def test_the_periodic_steps_run_once_a_period_and_later_sweeps_claim_nothing() -> None:
    world = memory_deps()
    world.clock.set(datetime(2026, 3, 7, 9, 0, 30, tzinfo=UTC))  # the start of a five-minute period
    claims: list[str] = []
    claim_key = world.store.claim_key

    def counted(key: str, *args: Any, **kwargs: Any) -> bool:
        claims.append(key)
        return claim_key(key, *args, **kwargs)

    world.store.claim_key = counted  # type: ignore[method-assign]
    periodic = []
    for _ in range(10):  # two periods, a sweep a minute
        periodic.append(Sweeper(world.deps).sweep().periodic)
        world.clock.advance(60)

    assert periodic == [True, False, False, False, False] * 2
    assert len(claims) == 2 and len(set(claims)) == 2  # one claim a period, none after its answer
    # A container that has not asked in this period claims it, and finds it taken.
    world.clock.advance(-60)
    fresh = replace(world.deps, cache={})
    assert Sweeper(fresh).sweep().periodic is False
    assert claims[-1] == claims[1]


def test_a_sweep_lists_the_tasks_once_for_its_steps_and_the_ledger() -> None:
    world = memory_deps()
    reads: list[int] = []
    tasks_epoch = world.store.tasks_epoch

    def counted() -> int:
        reads.append(1)
        return tasks_epoch()

    world.store.tasks_epoch = counted  # type: ignore[method-assign]
    report = Sweeper(world.deps).sweep()
    assert report.failures == [] and report.ledger.checked_until is not None
    assert len(reads) == 1
