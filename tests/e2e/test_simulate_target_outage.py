"""A shared dependency's outage in the simulator, with and without retry budgets per target.

Eight tasks call the same simulated target, which is down for 30 minutes. With budgets: exactly
one work order (the target's, resolved by itself once the target recovered), no dead letter, the
held runs released at the budget's pace, every run succeeded and every invariant held. Without:
each run caught in the outage spends its attempts and is dead-lettered."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from support import simulate

pytestmark = pytest.mark.e2e

SMALL_OUTAGE = """
description: a small shared-target outage
start: "2026-03-07T00:00:00Z"
duration: 1h
settle: 1h
seed: 3
task_groups:
  - count: 8
    id: "sync-{n}"
    tenant: acme
    schedule: {cron: "*/5 * * * *", timezone: UTC}
    target: {type: sim, name: shared-db, behavior: {outage: {after: 10m, for: 30m}}}
    retry_policy: {target_budget: {release_per_minute: 4}}
    timeout_s: 30
"""


def test_a_shared_outage_opens_one_work_order_and_no_dead_letter_with_budgets_and_many_without(
    tmp_path: Path,
) -> None:
    scenario = tmp_path / "outage.yaml"
    scenario.write_text(SMALL_OUTAGE)
    report_path = tmp_path / "outage.json"
    done = simulate(scenario, report_path, "--compare-budgets")
    assert done.returncode == 0, done.stdout + done.stderr
    report: dict[str, Any] = json.loads(report_path.read_text())
    assert all(inv["ok"] for inv in report["invariants"].values())

    with_budgets = report["compare_budgets"]["with_budgets"]
    assert with_budgets["target_work_orders"] == 1 and with_budgets["target_work_orders_resolved"] == 1
    assert with_budgets["dead_letters"] == 0
    assert with_budgets["runs_held"] > 8 and with_budgets["probes"] >= 1
    assert 1 <= with_budgets["released_peak_per_minute"] <= 4  # paced: the policy's rate
    assert with_budgets["runs_succeeded"] == report["summary"]["runs"]
    [order] = [o for o in report["work_orders"] if o["subject"].startswith("target#")]
    assert order["subject"] == "target#sim:shared-db#1" and order["state"] == "resolved"

    without = report["compare_budgets"]["without_budgets"]
    assert without["dead_letters"] >= 8 and without["target_work_orders"] == 0
    assert without["work_orders"] >= without["dead_letters"]
    assert "with budgets" in done.stdout and "without" in done.stdout


HOSTILE_OUTAGE = """
description: a shared-target outage under the hostile cloud
start: "2026-03-07T00:00:00Z"
duration: 1h
settle: 2h
seed: 4
task_groups:
  - count: 10
    id: "sync-{n}"
    tenant: acme
    schedule: {cron: "*/5 * * * *", timezone: UTC}
    target: {type: sim, name: shared-db, behavior: {outage: {after: 10m, for: 30m}}}
    timeout_s: 30
faults:
  duplicate_delivery: 3
  crash:
    points: [after_claim, after_target, before_outcome, after_retry_commit, after_redispatch_commit,
             after_publish, after_work_order_commit]
    rate: 0.05
  throttle: {"dynamodb:PutItem": 0.2, "dynamodb:TransactWriteItems": 0.1, "sqs:SendMessage": 0.1}
  transaction_conflict: 0.1
  index_lag: 2s
  receipt_handles: latest_only
  handler_timeouts: enforce
model:
  concurrency: 4
  executor_max_concurrency: 2
"""


@pytest.mark.parametrize("seed", [4, 5])
def test_under_the_hostile_cloud_the_target_keeps_one_work_order_and_every_held_run_is_released(
    tmp_path: Path, seed: int
) -> None:
    """Conflicts on the target's record, lagging indexes, crashes after a release is recorded and
    duplicate deliveries: still one work order, resolved; nothing left held; no run dead-lettered
    by the outage. A run whose workers the crashes kill until its attempts are spent is
    dead-lettered (TIMEOUT), as any run would be; those deaths do not trip the target again once
    the outage is over (seed 5 opened three target work orders when they did)."""
    scenario = tmp_path / "hostile-outage.yaml"
    scenario.write_text(HOSTILE_OUTAGE)
    report_path = tmp_path / "hostile-outage.json"
    done = simulate(scenario, report_path, "--seed", str(seed))
    assert done.returncode == 0, done.stdout + done.stderr
    report: dict[str, Any] = json.loads(report_path.read_text())
    assert report["invariants"]["target_work_orders_close"]["ok"]
    assert report["invariants"]["every_run_settled"]["ok"]
    budgets = report["target_budgets"]
    assert budgets["target_work_orders"] == 1 and budgets["target_work_orders_resolved"] == 1
    assert budgets["runs_held"] > 10
    dead = [run for run in report["runs"] if run["final_state"] == "dead_lettered"]
    assert budgets["dead_letters"] == len(dead)
    assert all(run["attempts"][-1]["error_code"] == "TIMEOUT" for run in dead), dead  # workers died
    orders = [o for o in report["work_orders"] if o["subject"].startswith("run#")]
    assert all(o["error_code"] == "TIMEOUT" and o["reason"] == "attempts_exhausted" for o in orders), orders
    faults = report["faults"]
    assert faults["transaction_conflicts"] and faults["crashes"].get("after_redispatch_commit")
