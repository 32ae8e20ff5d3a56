"""Work orders close when their runs recover, under the hostile local cloud (issue 16).

``scenarios/hostile-recovery.yaml``: a target is down for 40 minutes, the runs caught in it are
dead-lettered with a work order each, and an operator recovers them through ``rebound.ops`` (a
replay during the outage that fails again, a replay after it, a DLQ redrive, a skip and a cancel),
with duplicate delivery, crashes, throttles, conflicts and lagging indexes on. The invariant
``work_orders_close_when_their_runs_recover`` judges every order of those runs, and fails when a
resolved order is set back to open.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from support import REPO, simulate

pytestmark = pytest.mark.e2e

INVARIANT = "work_orders_close_when_their_runs_recover"


def test_under_the_hostile_cloud_every_recovered_runs_work_order_resolves_once(tmp_path: Path) -> None:
    report_path = tmp_path / "recovery.json"
    done = simulate(REPO / "scenarios" / "hostile-recovery.yaml", report_path)
    assert done.returncode == 0, done.stdout + done.stderr
    report: dict[str, Any] = json.loads(report_path.read_text())
    failed = {name: inv for name, inv in report["invariants"].items() if not inv["ok"]}
    assert not failed, failed

    counts = report["invariants"][INVARIANT]["counts"]
    assert counts["checked"] > 0  # not vacuous: it judged orders of every kind of recovery
    assert counts["succeeded"] >= 20 and counts["skipped"] >= 1 and counts["cancelled"] >= 1

    ops = {(op["op"], op["at"][11:16]): op for op in report["operations"]}
    assert all(op["ok"] for op in report["operations"]), report["operations"]
    during, after = ops[("replay", "00:45")], ops[("replay", "01:10")]
    assert during["runs"] and after["runs"]
    assert ops[("redrive", "01:15")]["runs"] and ops[("skip", "01:12")]["runs"]
    assert ops[("cancel", "01:12")]["runs"]

    # The runs replayed during the outage were dead-lettered twice, yet each has one work order
    # (the second dead letter an occurrence of the first), and every one of them succeeded.
    per_run = Counter(order["run_id"] for order in report["work_orders"])
    states = {run["run_id"]: run["final_state"] for run in report["runs"]}
    for run_id in during["runs"]:
        assert per_run[run_id] == 1 and states[run_id] == "succeeded"
    # After the outage a replayed or redriven run succeeds, unless the hostile cloud's crashes
    # killed each attempt of its new budget (each then ends TIMEOUT, by its lease): that run is
    # dead-lettered again, with its one work order, as the invariants above check.
    runs = {run["run_id"]: run for run in report["runs"]}
    for op in (after, ops[("redrive", "01:15")]):
        for run_id in op["runs"]:
            later = [a for a in runs[run_id]["attempts"] if a["started_at"] >= op["at"]]
            crashed = later and all(a["error_code"] == "TIMEOUT" for a in later)
            assert states[run_id] == "succeeded" or (states[run_id] == "dead_lettered" and crashed), run_id
    recovered = after["runs"] + ops[("redrive", "01:15")]["runs"]
    assert sum(states[run_id] == "succeeded" for run_id in recovered) >= len(recovered) - 2

    faults = report["faults"]
    assert faults["throttled"].get("sns:Publish") and faults["transaction_conflicts"]
    assert faults["crashes"] and faults["lagged_index_queries"]


SABOTAGED = """
description: a resolved work order set back to open
start: "2026-03-07T00:00:00Z"
duration: 1h
settle: 1h
tasks:
  - id: flaky
    tenant: acme
    schedule: {cron: "*/15 * * * *"}
    target: {type: sim, name: db, behavior: {outage: {after: 0s, for: 20m}}}
    retry_policy: {extends: quick, max_attempts: 2, target_budget: {enabled: false}}
    timeout_s: 30
operations:
  - {at: 30m, replay: dead_lettered, task: flaky}
sabotage:
  reopen_work_orders: 1
"""


def test_a_resolved_work_order_set_back_to_open_fails_the_invariant(tmp_path: Path) -> None:
    scenario = tmp_path / "reopened.yaml"
    scenario.write_text(SABOTAGED)
    report_path = tmp_path / "reopened.json"
    done = simulate(scenario, report_path)
    assert done.returncode == 1, done.stdout + done.stderr
    report: dict[str, Any] = json.loads(report_path.read_text())
    failed = {name for name, inv in report["invariants"].items() if not inv["ok"]}
    assert failed == {INVARIANT}, failed
    [reopened] = report["faults"]["sabotage"]["reopen_work_orders"]
    examples = report["invariants"][INVARIANT]["examples"]
    assert any(e.startswith(f"{reopened}: still open") for e in examples), examples
