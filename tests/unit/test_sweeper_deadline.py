"""A sweep starts no step it has no time left for: the Lambda timeout never cuts one off half-way."""

from __future__ import annotations

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
