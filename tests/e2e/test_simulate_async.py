"""``scenarios/async-long-jobs.yaml``: asynchronous jobs of one to three hours under the hostile
local cloud, their heartbeats and completions played on the simulated clock by the sim worker and
reported as events on the bus. Every invariant holds, and each case of the issue shows up."""

from __future__ import annotations

import json
from typing import Any

import pytest

from rebound.domain.tenancy import short_id
from support import REPO, simulate

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    path = tmp_path_factory.mktemp("async") / "async.json"
    done = simulate(REPO / "scenarios" / "async-long-jobs.yaml", path)
    assert done.returncode == 0, done.stdout + done.stderr
    return dict(json.loads(path.read_text()))


def attempts(report: dict[str, Any], task_id: str) -> list[tuple[str, str | None]]:
    return [
        (a["outcome"], a["error_code"])
        for run in report["runs"]
        if short_id(run["task_id"]) == task_id
        for a in run["attempts"]
    ]


def test_every_invariant_holds_with_hostile_faults_on(report: dict[str, Any]) -> None:
    assert report["ok"]
    invariants = report["invariants"]
    assert all(inv["ok"] for inv in invariants.values()), invariants
    assert {"one_outcome_per_attempt", "refused_reports_never_reopen_a_run"} <= set(invariants)
    assert report["faults"]["duplicate_delivery"] == 3 and report["faults"]["crashes"]


def test_healthy_jobs_of_one_to_three_hours_succeed_by_reporting(report: dict[str, Any]) -> None:
    assert set(attempts(report, "export-healthy")) == {("succeeded", None)}
    [backup] = [r for r in report["runs"] if short_id(r["task_id"]) == "backup-long"]
    assert backup["final_state"] == "succeeded"
    [attempt] = backup["attempts"]
    assert attempt["ended_at"] > "2026-03-07T03:09"  # 2 h 40 min after it started, not at once


def test_a_job_that_stops_heartbeating_times_out_and_is_retried_then_dead_lettered(
    report: dict[str, Any],
) -> None:
    assert attempts(report, "etl-stops-heartbeating") == [("timeout", "HEARTBEAT_TIMEOUT")] * 2
    [run] = [r for r in report["runs"] if short_id(r["task_id"]) == "etl-stops-heartbeating"]
    assert run["final_state"] == "dead_lettered" and run["work_order_id"]


def test_a_job_past_its_max_duration_times_out_breaches_the_sla_and_its_late_completion_is_refused(
    report: dict[str, Any],
) -> None:
    assert attempts(report, "report-completes-late")[0] == ("timeout", "TIMEOUT")
    assert report["metrics"]["task.sla.breach_total"] >= 1
    assert report["async_reports"]["refused"]["timed_out"] >= 1


def test_duplicate_completions_end_in_one_outcome_and_are_refused_as_used(report: dict[str, Any]) -> None:
    runs = [r for r in report["runs"] if short_id(r["task_id"]) == "batch-duplicates"]
    assert runs and all(run["final_state"] == "succeeded" for run in runs)
    called = {(c["run_id"], c["attempt"]) for c in report["target_calls"]}
    for run in runs:
        *earlier, last = run["attempts"]
        assert (last["outcome"], last["error_code"]) == ("succeeded", None)
        # An earlier attempt only where the hostile cloud crashed the executor after its claim,
        # before the job started: no heartbeat ever came, and it timed out and was retried.
        for attempt in earlier:
            assert (attempt["outcome"], attempt["error_code"]) == ("timeout", "HEARTBEAT_TIMEOUT")
            assert (run["run_id"], attempt["n"]) not in called
    # each reported its completion three times (duplicate_completions: 2), and the bus delivered
    # each report three times (duplicate_delivery: 3): all but one per attempt refused as used
    assert report["async_reports"]["sent"]["rebound.task.completed"] >= 3 * len(runs)
    assert report["async_reports"]["refused"]["used"] >= 8 * len(runs)


def test_a_reported_failure_goes_through_the_retry_policy(report: dict[str, Any]) -> None:
    assert attempts(report, "import-fails")[0] == ("failed", "IMPORT_BROKEN")
