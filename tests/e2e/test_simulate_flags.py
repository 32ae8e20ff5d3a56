"""Feature flags switched mid-day under the hostile local cloud (issue 37).

``scenarios/hostile-flags.yaml``: the operator turns ``task-retry-queue`` off at 40 m and on again
at 80 m, and ``task-sla-monitor`` off from 30 m to 90 m, through ``rebound.ops.flags`` and the
local cloud's AppConfig, while messages are delivered three times, handlers crash, writes are
throttled and conflict, and indexes lag. Every standing invariant must hold, and each flag's
effect shows in the runs of its window and only there.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from support import REPO, simulate

pytestmark = pytest.mark.e2e


def minute(stamp: str) -> int:
    """Minutes into the window (it starts at midnight)."""
    at = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    return at.hour * 60 + at.minute


def test_retries_and_the_sla_monitor_switched_off_and_on_hold_every_invariant(tmp_path: Path) -> None:
    report_path = tmp_path / "flags.json"
    done = simulate(REPO / "scenarios" / "hostile-flags.yaml", report_path)
    assert done.returncode == 0, done.stdout + done.stderr
    report: dict[str, Any] = json.loads(report_path.read_text())
    failed = {name: inv for name, inv in report["invariants"].items() if not inv["ok"]}
    assert not failed, failed
    switches = [(op["flag"], op["set"], op["ok"], op["changed"]) for op in report["operations"]]
    assert switches == [
        ("task-sla-monitor", "off", True, True),
        ("task-retry-queue", "off", True, True),
        ("task-retry-queue", "on", True, True),
        ("task-sla-monitor", "on", True, True),
    ]

    flaky = [run for run in report["runs"] if ".flaky-" in run["task_id"]]
    while_off = [run for run in flaky if 40 <= minute(run["scheduled_for"]) < 80]
    otherwise = [run for run in flaky if not 40 <= minute(run["scheduled_for"]) < 80]
    assert while_off and otherwise
    # Off: a failed first attempt is dead-lettered at once, with its work order and no retry.
    assert {(run["final_state"], len(run["attempts"])) for run in while_off} == {("dead_lettered", 1)}
    orders = {order["run_id"]: order for order in report["work_orders"]}
    assert all(orders[run["run_id"]]["reason"] == "retries_disabled_by_flag" for run in while_off)
    # On (before and after): retried; the run whose every retry a crash or a conflict spent (a
    # crashed invocation takes its batch's other attempts with it) is dead-lettered with its whole
    # budget spent, never for the flag. Which runs those are depends on the seed's draws.
    assert all(len(run["attempts"]) >= 2 for run in otherwise)
    spent = [run for run in otherwise if run["final_state"] != "succeeded"]
    assert all(run["final_state"] == "dead_lettered" and len(run["attempts"]) == 3 for run in spent)
    assert all(a["outcome"] == "timeout" for run in spent for a in run["attempts"][1:])
    assert len(spent) <= len(otherwise) // 10
    assert all(
        orders[run["run_id"]]["reason"] != "retries_disabled_by_flag"
        for run in otherwise
        if run["run_id"] in orders
    )
    # The SLA monitor off from 30 m to 90 m: the steady runs (5 s against a 2 s SLA) breach when
    # their last attempt ends before or after, and never in between (judged as the attempt ends;
    # the minute of a switch may go either way).
    steady = [run for run in report["runs"] if ".steady-" in run["task_id"]]
    ended = [(minute(run["attempts"][-1]["ended_at"]), bool(run["sla_breaches"])) for run in steady]
    assert all(breached for m, breached in ended if m < 30 or m > 90)
    assert not any(breached for m, breached in ended if 30 < m < 90)
    assert sum(1 for m, _ in ended if 30 < m < 90) >= 10
