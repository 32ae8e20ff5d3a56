"""Operators racing the engine under the hostile local cloud: ``scenarios/workstreams-races.yaml``
holds every invariant, the race invariants among them, with each race carried out at the instant
its step ended (its end event still in the outbox); sabotage shows each race invariant can fail."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from rebound_local.scenario import load_scenario
from rebound_local.simulate import Simulation

pytestmark = pytest.mark.e2e

SCENARIO = Path(__file__).resolve().parents[2] / "scenarios" / "workstreams-races.yaml"
RACE_INVARIANTS = {
    "workstream_completed_steps_run_once",
    "superseded_runs_stay_closed",
    "workstream_one_run_per_start_token",
}


@pytest.fixture(scope="module")
def report() -> dict[str, Any]:
    return Simulation(load_scenario(SCENARIO)).run().report


def raced(report: dict[str, Any], op: str) -> dict[str, Any]:
    [entry] = [e for e in report["operations"] if e["op"] == op and "trigger" in e]
    return entry


def test_every_invariant_holds_while_operators_race_the_engine(report: dict[str, Any]) -> None:
    failed = {k: v for k, v in report["invariants"].items() if not v["ok"]}
    assert not failed, failed
    assert set(report["invariants"]) >= RACE_INVARIANTS
    assert sum(report["faults"]["crashes"].values()) > 0, "no crash was injected"
    assert {r["workstream_id"]: r["state"] for r in report["workstream_runs"]} == {
        "ledger": "completed",
        "billing": "completed",
        "fanout": "completed",
    }


def test_each_race_was_carried_out_with_the_step_s_end_still_in_the_outbox(report: dict[str, Any]) -> None:
    rollback = raced(report, "rollback")
    assert rollback["trigger"]["step"] == "extract" and rollback["trigger"]["state"] == "succeeded"
    assert "extract" in rollback["not_rolled_back"] and rollback["cancelled"] == []
    for op, step in (("cancel_step", "part-a"), ("skip", "load")):
        refused = raced(report, op)
        assert refused["trigger"]["step"] == step and refused["ok"] is False
        assert f"step {step} is already succeeded" in refused["error"]
    retried = raced(report, "retry_failed")
    assert retried["trigger"]["state"] == "dead_lettered" and retried["started"] == ["compute"]
    assert all(
        e["trigger"]["end_event"] == "in the outbox, not relayed"
        for e in report["operations"]
        if "trigger" in e
    )


def test_superseded_runs_are_closed_and_never_replayed(report: dict[str, Any]) -> None:
    superseded = [r for r in report["runs"] if r["final_state"] == "superseded"]
    assert len(superseded) >= 3, "the step runs retry-failed replaced (compute twice, report once)"
    [replay] = [e for e in report["operations"] if e["op"] == "replay"]
    assert replay["runs"] == [] and all("superseded by" in why for why in replay["refused"].values())
    starts = {e["run_id"] for e in report["operations"] if e["op"] == "start" and e.get("token")}
    assert len(starts) == 2, "three ledger starts with one token, one billing start: two runs"


def test_sabotage_breaks_each_race_invariant(tmp_path: Path) -> None:
    doc = yaml.safe_load(SCENARIO.read_text())
    doc["sabotage"] = {"rerun_completed_steps": 1, "reopen_superseded_orders": 1, "ignore_start_tokens": 1}
    sabotaged = tmp_path / "races-sabotaged.yaml"
    sabotaged.write_text(yaml.safe_dump(doc))
    out = Simulation(load_scenario(sabotaged)).run().report
    failed = {name for name, held in out["invariants"].items() if not held["ok"]}
    assert failed >= RACE_INVARIANTS, failed
    [rerun] = out["faults"]["sabotage"]["rerun_completed_steps"]
    assert any(
        rerun.removesuffix("-again").split(":")[0] in e
        for e in out["invariants"]["workstream_completed_steps_run_once"]["examples"]
    )
    [reopened] = out["faults"]["sabotage"]["reopen_superseded_orders"]
    assert any(reopened in e for e in out["invariants"]["superseded_runs_stay_closed"]["examples"])
    assert out["faults"]["sabotage"]["ignore_start_tokens"] == ["nightly-2026-03-07"]
