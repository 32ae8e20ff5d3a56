"""Workstreams under the hostile local cloud: ``scenarios/workstreams-hostile.yaml`` holds every
invariant, the workstream ones among them, and its report shows each workstream run and its
checkpoints."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rebound.domain.tenancy import short_id
from rebound_local.scenario import load_scenario
from rebound_local.simulate import Simulation

pytestmark = pytest.mark.e2e

SCENARIO = Path(__file__).resolve().parents[2] / "scenarios" / "workstreams-hostile.yaml"
WORKSTREAM_INVARIANTS = {
    "workstream_fires_became_runs",
    "workstream_steps_start_after_their_needs",
    "workstream_rollbacks_keep_completed_steps",
    "workstream_resources_within_max_holders",
    "workstream_runs_settled",
}


@pytest.fixture(scope="module")
def report() -> dict[str, Any]:
    return Simulation(load_scenario(SCENARIO)).run().report


def steps_of(report: dict[str, Any], workstream: str) -> dict[str, str]:
    """The steps of the workstream's one run."""
    (run,) = [r for r in report["workstream_runs"] if r["workstream_id"] == workstream]
    return {s["step"]: s["state"] for s in run["steps"]}


def test_every_invariant_holds_with_workstreams_under_hostile_faults(report: dict[str, Any]) -> None:
    failed = {k: v for k, v in report["invariants"].items() if not v["ok"]}
    assert not failed, failed
    assert set(report["invariants"]) >= WORKSTREAM_INVARIANTS
    assert report["ok"] is True and report["hung"] is None
    faults = report["faults"]
    assert sum(faults["crashes"].values()) > 0, "no crash was injected"
    assert sum(faults["transaction_conflicts"].values()) > 0, "no conflict was injected"
    # the shared resource was contended: at some moment two steps held it, its max_holders
    assert (
        "warehouse peak 2 of 2" in report["invariants"]["workstream_resources_within_max_holders"]["detail"]
    )


def test_each_workstream_ends_as_its_failures_and_the_operator_decide(report: dict[str, Any]) -> None:
    states = {
        r["workstream_id"]: r["state"] for r in report["workstream_runs"] if r["workstream_id"] != "sync"
    }
    assert states == {
        "ledger": "completed",
        "billing": "completed",
        "fanout": "completed",
        "slow": "completed",
    }
    ledger = steps_of(report, "ledger")
    assert ledger["report"] == "failed", "a non-critical step dead-lettered without failing the workstream"
    assert ledger["transform"] == "succeeded"
    billing = steps_of(report, "billing")
    assert (billing["fetch"], billing["compute"], billing["publish"]) == ("succeeded", "skipped", "succeeded")
    runs = {r["run_id"]: r for r in report["runs"]}
    transform = next(r for r in report["workstream_runs"] if r["workstream_id"] == "ledger")["steps"][1]
    attempts = runs[transform["run_id"]]["attempts"]
    assert len(attempts) >= 3 and attempts[-1]["outcome"] == "succeeded", "failed twice, retried, succeeded"
    # the failed billing run opened its critical work order before the operator stepped in
    assert any(o["subject"].startswith("workstream#billing:") for o in report["work_orders"])


def test_the_operator_rolled_back_twice_and_completed_steps_kept_their_state(report: dict[str, Any]) -> None:
    done = {(o["workstream"], o["op"]): o for o in report["operations"]}
    assert all(o["ok"] for o in report["operations"]), report["operations"]
    slow = done[("slow", "rollback")]
    assert len(slow["cancelled"]) == 1 and short_id(slow["cancelled"][0].split(":")[0]) == "long-step"
    billing = done[("billing", "rollback")]
    assert "completed steps are never rolled back" in billing["not_rolled_back"]["fetch"]
    assert "2 rollback(s)" in report["invariants"]["workstream_rollbacks_keep_completed_steps"]["detail"]


def test_a_scheduled_workstream_starts_one_run_per_fire_though_each_start_is_delivered_three_times(
    report: dict[str, Any],
) -> None:
    sync = [r for r in report["workstream_runs"] if r["workstream_id"] == "sync"]
    assert len(sync) >= 3  # 02:20, 02:40 and 03:00 at least, the window's end
    assert all(r["run_id"].startswith("sync:2026030") for r in sync)  # named by the fire's time
    assert all(r["state"] in ("completed", "failed") for r in sync)
    assert report["faults"]["duplicate_delivery"] == 3
    detail = report["invariants"]["workstream_fires_became_runs"]["detail"]
    assert "workstream fires, one run each" in detail and f"of {len(sync)} " in detail


def test_the_report_counts_checkpoints_per_run_and_in_all(report: dict[str, Any]) -> None:
    per_run = [r["checkpoints"] for r in report["workstream_runs"]]
    assert all(c["taken"] >= 2 and c["kept"] == c["taken"] for c in per_run), per_run
    assert report["checkpoints"] == {
        "runs": len(per_run),
        "taken": sum(c["taken"] for c in per_run),
        "kept": sum(c["kept"] for c in per_run),
    }
    for run in report["workstream_runs"]:
        for step in run["steps"]:
            assert set(step) == {"step", "task_id", "run_id", "state", "started_at", "ended_at"}
