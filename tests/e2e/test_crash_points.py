"""The crash-point sweep: every crash point the code declares crashes at its first hit, and every
invariant still holds. The points the base scenario reaches on its own crash in one run; each
point reached only after something else went wrong has a run of its own.

One base scenario reaches every point: plain, flaky and broken tasks, a mutex group whose runs
overlap, an ``overlap: cancel_other`` task, a task whose second 01:30 at the New York fall-back
Rebound delivers itself, a malformed message, a replay an operator moved back from the DLQ, and a
message SQS moved to the DLQ on its own. A few points are only reached after something else went
wrong; their scenario adds that first crash too, or the fault that causes it.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from rebound.engine.crashpoints import CRASH_POINTS
from rebound_local.scenario import parse_scenario
from rebound_local.simulate import Simulation

pytestmark = pytest.mark.e2e

BASE: dict[str, Any] = {
    "description": "crash-point sweep",
    "start": "2026-11-01T05:00:00Z",
    "duration": "1h45m",
    "settle": "2h",
    "seed": 5,
    "tasks": [
        {"id": "steady", "tenant": "acme", "schedule": {"cron": "*/5 * * * *"}, "target": {"type": "sim"}},
        {
            "id": "flaky",
            "tenant": "acme",
            "schedule": {"cron": "*/10 * * * *"},
            "target": {"type": "sim", "behavior": {"fail_first": 1}},
            "retry_policy": {"extends": "quick", "base_delay": "20s"},
        },
        {
            "id": "broken",
            "tenant": "acme",
            "schedule": {"cron": "*/30 * * * *"},
            "target": {"type": "sim", "behavior": {"always_fail": True}},
            "retry_policy": {"extends": "quick", "max_attempts": 2, "base_delay": "20s"},
        },
        *(
            {
                "id": f"mutex-{n}",
                "tenant": "acme",
                "mutex_group": "ledger-db",
                "schedule": {"cron": "*/5 * * * *"},
                "target": {"type": "sim", "behavior": {"duration_s": 50}},
            }
            for n in (1, 2)
        ),
        {
            "id": "overlapper",
            "tenant": "initech",
            "overlap": "cancel_other",
            "schedule": {"cron": "*/2 * * * *"},
            "target": {"type": "sim", "behavior": {"duration_s": 150}},
            "timeout_s": 200,
        },
        {
            "id": "nightly",
            "tenant": "initech",
            "schedule": {"cron": "30 1 * * *", "timezone": "America/New_York", "dst": {"repeated": "twice"}},
            "target": {"type": "sim"},
        },
    ],
    "messages": [
        {"at": "7m", "queue": "execution", "body": '{"kind": "fire", "task_id": "Not A Valid Id!"'},
        {
            "at": "10m",
            "queue": "dlq",
            "body": json.dumps(
                {"v": 1, "kind": "fire", "task_id": "acme.steady", "scheduled_time": "2026-11-01T04:20:00Z"}
            ),
        },
        {
            "at": "50m",
            "queue": "execution",
            "body": '{"v": 1, "kind": "replay", "run_id": "acme.broken:20261101T053000Z"}',
        },
    ],
}

# What must go wrong first for a point to be reached at all.
NEEDS: dict[str, dict[str, Any]] = {
    "after_redispatch_commit": {"crash": ["after_wait"]},
    # The relay must fail a batch until the mapping gives up (it bisects crashed batches first).
    "after_republish": {
        "crash": ["after_publish"],
        "limits": {"after_publish": 40},
        "faults": {"stream_retries": 0},
    },
    "after_release": {"model": {"aws_call_ms": 10_000}, "slow_task": True},
}


def scenario_for(point: str) -> dict[str, Any]:
    data = copy.deepcopy(BASE)
    needs = NEEDS.get(point, {})
    points = [point, *needs.get("crash", [])]
    crash = {"points": points, "rate": 1.0, "limit": 1, "limits": needs.get("limits", {})}
    data["faults"] = {"crash": crash, **needs.get("faults", {})}
    if "model" in needs:
        data["model"] = needs["model"]
    if needs.get("slow_task"):
        # Every AWS call takes 10 s, and each run finds its predecessor still running: by the time
        # it has cancelled it (overlap: cancel_other) and could claim, less than its 270 s timeout
        # is left in the executor's 300 s, so it is released to a fresh message instead.
        data["tasks"] = [
            {
                "id": "slow",
                "tenant": "acme",
                "overlap": "cancel_other",
                "schedule": {"cron": "*/3 * * * *"},
                "target": {"type": "sim", "behavior": {"duration_s": 400}},
                "timeout_s": 270,
            }
        ]
        data["messages"] = []
        data["duration"], data["settle"] = "20m", "4h"  # everything is slow: a short window, time to settle
    return data


def test_the_sweep_covers_every_declared_crash_point() -> None:
    assert set(CRASH_POINTS) == set(POINTS)


POINTS = sorted(CRASH_POINTS)


def simulate(data: dict[str, Any], name: str, tmp_path: Path) -> dict[str, Any]:
    (tmp_path / "scenario.yaml").write_text(yaml.safe_dump(data))
    loaded = parse_scenario(data, name, tmp_path)
    report: dict[str, Any] = Simulation(loaded, log_file=tmp_path / "handlers.log").run().report
    failed = {name: inv for name, inv in report["invariants"].items() if not inv["ok"]}
    assert failed == {}, failed
    assert report["pending"]["settled"], report["pending"]
    return report


TOGETHER = [p for p in POINTS if p not in NEEDS]


def test_a_crash_at_the_first_hit_of_every_point_at_once_loses_nothing(tmp_path: Path) -> None:
    """Every point the base scenario reaches on its own crashes once, at its first hit, in one
    run: each crash is recovered from while the others happen, and every invariant holds."""
    data = copy.deepcopy(BASE)
    data["faults"] = {"crash": {"points": TOGETHER, "rate": 1.0, "limit": 1}}
    report = simulate(data, "crash-every-point.yaml", tmp_path)
    crashed = report["faults"]["crashes"]
    assert {p: crashed.get(p) for p in TOGETHER} == dict.fromkeys(TOGETHER, 1), crashed


@pytest.mark.parametrize("point", sorted(NEEDS))
def test_a_crash_at_a_point_reached_only_after_another_failure_loses_nothing(
    point: str, tmp_path: Path
) -> None:
    report = simulate(scenario_for(point), f"crash-{point}.yaml", tmp_path)
    crashed = report["faults"]["crashes"]
    assert crashed.get(point) == 1, f"{point} was never reached: {crashed}"


def test_writes_stopped_between_their_audit_record_and_their_item_lose_nothing(tmp_path: Path) -> None:
    """A run's change written without a transaction (its audit record, then its item) stopped
    between the two, forty times over a day of claims and outcomes: every run still ends where its
    chain says, no run is left running, and every invariant holds (the next writer rolls the item
    forward: ``rebound.adapters.dynamo.write_ahead``)."""
    data = scenario_for("after_audit_record")
    # Some two hundred writes reach the point in this scenario; at one in two, the fortieth crash comes
    # early in the day whatever order the threads take (at one in four it fell short on CI).
    data["faults"]["crash"].update({"rate": 0.5, "limit": 40})
    report = simulate(data, "crash-after-audit-record-often.yaml", tmp_path)
    assert report["faults"]["crashes"].get("after_audit_record") == 40, report["faults"]["crashes"]
