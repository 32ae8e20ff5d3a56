"""``rebound local simulate`` in hostile mode: the report counts what was injected, and a simulation
that cannot finish says what was still running instead of hanging.

These tests do not judge the engine under the new faults (the invariants are another test's
business); they check that each fault reaches the report and that the simulator always ends.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from rebound_local.scenario import parse_scenario
from rebound_local.simulate import Simulation, run_simulate

pytestmark = pytest.mark.e2e

HOSTILE = {
    "start": "2026-03-07T09:00:00Z",
    "duration": "15m",
    "settle": "30m",
    "seed": 3,
    "tasks": [
        {"id": f"tick-{n}", "tenant": "acme", "schedule": {"cron": "* * * * *"}, "target": {"type": "sim"}}
        for n in range(4)
    ],
    "faults": {
        "crash": {"points": ["after_claim"], "rate": 1.0, "limit": 1},
        "transaction_conflict": 0.2,
        "index_lag": "2s",
        "receipt_handles": "latest_only",
        "handler_timeouts": "enforce",
        "stream_retries": 3,
    },
    "model": {"concurrency": 4, "executor_max_concurrency": 2},
}
QUIET = {
    "start": "2026-03-07T09:00:00Z",
    "duration": "3m",
    "settle": "10m",
    "tasks": [{"id": "tick", "tenant": "acme", "schedule": {"cron": "* * * * *"}, "target": {"type": "sim"}}],
}


def test_the_report_counts_every_fault_injected_and_the_runtime_caps(tmp_path: Path) -> None:
    report = Simulation(parse_scenario(HOSTILE, "hostile.yaml")).run().report

    faults = report["faults"]
    assert faults["crashes"] == {"after_claim": 1}  # the limit: the first hit only
    assert faults["crash_limit"] == 1
    assert sum(faults["transaction_conflicts"].values()) > 0
    assert set(faults["transaction_conflicts"]) <= {
        "dynamodb:TransactWriteItems",
        "dynamodb:PutItem",
        "dynamodb:UpdateItem",
        "dynamodb:DeleteItem",
    }
    assert faults["index_lag_s"] == 2.0
    assert (faults["handler_timeouts"], faults["stream_retries"]) == ("enforce", 3)
    assert "stale_receipt_handles" in faults and "lagged_index_queries" in faults
    runtime = report["runtime"]
    assert runtime["concurrency"] == 4
    assert runtime["max_concurrency"]["executor"] == 2
    assert 1 <= runtime["peak_concurrency"]["executor"] <= 2
    assert runtime["max_concurrency"]["retry_scheduler"] == 4
    assert {"timeouts", "abandoned_at_close", "stream_failure_records"} <= set(runtime)
    assert report["hung"] is None


def test_registering_the_tasks_is_not_throttled_and_the_window_is() -> None:
    """Registering the scenario's tasks is setup, not judged: its CreateSchedule calls are not
    throttled (so none waits out botocore's backoff in real time), while the window's writes are
    throttled as the scenario asks."""
    data = {**QUIET, "faults": {"throttle": {"scheduler:CreateSchedule": 0.9, "dynamodb:PutItem": 0.5}}}
    report = Simulation(parse_scenario(data, "throttled-setup.yaml")).run().report
    throttled = report["faults"]["throttled"]
    assert throttled.get("scheduler:CreateSchedule", 0) == 0, throttled  # only setup creates one
    assert throttled.get("dynamodb:PutItem", 0) > 0, throttled
    assert report["summary"]["runs_by_state"] == {"succeeded": 4}  # 09:00 to 09:03, both ends


def test_the_same_seed_gives_the_same_hostile_run() -> None:
    first = Simulation(parse_scenario(HOSTILE, "hostile.yaml")).run().report
    again = Simulation(parse_scenario(HOSTILE, "hostile.yaml")).run().report
    for key in ("faults", "summary", "aws_calls"):
        assert again[key] == first[key], key
    assert [r["final_state"] for r in again["runs"]] == [r["final_state"] for r in first["runs"]]


def test_a_simulation_whose_invocations_never_return_reports_them_and_exits_3(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rebound import wiring

    def asleep(event: dict[str, Any], context: Any) -> None:
        wiring.deps().clock.sleep(10 * 3600)  # far past the sweeper's 4-minute timeout

    monkeypatch.setattr("rebound.handlers.sweeper.lambda_handler", asleep)
    scenario = tmp_path / "quiet.yaml"
    scenario.write_text(json.dumps(QUIET))
    report_path = tmp_path / "quiet.json"
    began = time.monotonic()
    code = run_simulate(scenario, report_path, quiet=True)
    assert time.monotonic() - began < 60
    assert code == 3
    report = json.loads(report_path.read_text())
    assert report["ok"] is False
    hung = report["hung"]
    assert "still running" in hung["reason"]
    assert {r["function"] for r in hung["running"]} == {"sweeper"}
    assert hung["running"][0]["since"] == "2026-03-07T09:01:00.000Z"
    assert hung["running"][0]["deadline"] == "2026-03-07T09:05:00.000Z"
    assert report["invariants"]  # the run itself was judged as usual
    assert report["runtime"]["abandoned_at_close"]["sweeper"] == len(hung["running"])


def test_a_worker_stuck_off_the_clock_ends_the_run_with_a_report_of_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    release = threading.Event()

    def stuck(event: dict[str, Any], context: Any) -> dict[str, Any]:
        release.wait(30)
        return {"batchItemFailures": []}

    monkeypatch.setattr("rebound.handlers.executor.lambda_handler", stuck)
    timer = threading.Timer(10.0, release.set)
    timer.start()
    try:
        report = Simulation(parse_scenario(QUIET, "quiet.yaml"), stall_wall_s=1.0).run().report
    finally:
        release.set()
        timer.cancel()
    assert report["ok"] is False and report["invariants"] == {}
    [running] = report["hung"]["running"]
    assert running["function"] == "executor" and len(running["messages"]) == 1
    assert report["virtual_time"]["ended_at"] == "2026-03-07T09:00:00.000Z"  # the first fire's batch
