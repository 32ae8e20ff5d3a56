"""The simulator report's dispatch latency: how late scheduled runs started."""

from __future__ import annotations

from typing import Any

from rebound_local.simulate import _on_time, dispatch_latency


def run(
    scheduled: str, started: str | None, *, trigger: str = "schedule", due_at: str | None = None
) -> dict[str, Any]:
    attempts = [{"n": 1, "started_at": started}] if started else []
    return {"trigger": trigger, "scheduled_for": scheduled, "due_at": due_at, "attempts": attempts}


def test_latency_is_first_start_minus_the_planned_start() -> None:
    runs = [run("2026-03-07T09:00:00Z", f"2026-03-07T09:00:{s:02d}Z") for s in range(10)]
    out = dispatch_latency(runs)
    assert out["scheduled_runs"] == out["started"] == 10
    assert (out["p50_s"], out["p90_s"], out["p99_s"], out["max_s"]) == (4.0, 8.0, 9.0, 9.0)
    assert out["on_time_pct"] == 100.0


def test_a_staggered_run_is_measured_from_its_due_time() -> None:
    staggered = run("2026-03-07T09:00:00Z", "2026-03-07T09:05:10Z", due_at="2026-03-07T09:05:00Z")
    out = dispatch_latency([staggered])
    assert out["max_s"] == 10.0 and out["on_time"] == 1


def test_event_and_manual_runs_are_not_counted_and_unstarted_ones_are_not_on_time() -> None:
    runs = [
        run("2026-03-07T09:00:00Z", "2026-03-07T09:00:30Z"),
        run("2026-03-07T09:00:00Z", "2026-03-07T09:02:00Z"),  # 120 s late
        run("2026-03-07T09:00:00Z", None),  # skipped: never started
        run("2026-03-07T09:00:00Z", "2026-03-07T10:00:00Z", trigger="manual"),
    ]
    out = dispatch_latency(runs)
    assert (out["scheduled_runs"], out["started"], out["not_started"], out["on_time"]) == (3, 2, 1, 1)
    assert out["on_time_pct"] == 50.0  # of the runs that started
    verdict = _on_time(out, 99.0)
    assert not verdict.ok
    assert "33.33 % of 3 scheduled runs" in verdict.detail  # an unstarted run is not on time


def test_the_expectation_holds_at_its_threshold_and_fails_without_runs() -> None:
    runs = [run("2026-03-07T09:00:00Z", "2026-03-07T09:01:00Z")]  # exactly 60 s: on time
    assert _on_time(dispatch_latency(runs), 100.0).ok
    assert not _on_time(dispatch_latency([]), 99.0).ok


def test_a_jittered_run_is_measured_from_the_end_of_its_window() -> None:
    jittered = {**run("2026-03-07T09:00:00Z", "2026-03-07T09:07:30Z"), "task_id": "spread"}
    plain = {**run("2026-03-07T09:00:00Z", "2026-03-07T09:07:30Z"), "task_id": "plain"}
    out = dispatch_latency([jittered, plain], {"spread": 600.0})
    assert (out["on_time"], out["scheduled_runs"]) == (1, 2)  # 7.5 min into a 10-minute window is on time
    assert out["max_s"] == 450.0  # the plain one, 7.5 min late
