"""The pre-flight's conflict-warning hit rate (``rebound_local.conflicts``, ``make bench`` group
``conflicts``) on a small simulated scenario: the collisions the simulator records, the warnings
the pre-flight gives beforehand, and the score between them. Not its speed."""

from __future__ import annotations

from pathlib import Path

import pytest

from rebound_local.conflicts import measure, scenario_preflight
from rebound_local.scenario import load_scenario

pytestmark = pytest.mark.e2e

SMALL = """
description: two loads sharing a mutex, a task that overlaps itself, two that never meet
start: "2026-03-07T00:00:00Z"
duration: 2h
settle: 30m
seed: 3
tasks:
  - id: load-a
    tenant: acme
    schedule: {cron: "0 * * * *"}
    target: {type: sim, behavior: {duration_s: 120}}
    timeout_s: 200
    mutex_group: warehouse
  - id: load-b
    tenant: acme
    schedule: {cron: "1 * * * *"}
    target: {type: sim, behavior: {duration_s: 30}}
    timeout_s: 200
    mutex_group: warehouse
  - id: sync
    tenant: acme
    schedule: {cron: "0,3 * * * *"}
    target: {type: sim, behavior: {duration_s: 200}}
    timeout_s: 250
    overlap: skip
  - id: quiet-a
    tenant: acme
    schedule: {cron: "*/10 * * * *"}
    target: {type: sim, behavior: {duration_s: 5}}
    timeout_s: 60
    mutex_group: archive
  - id: quiet-b
    tenant: acme
    schedule: {cron: "5-55/10 * * * *"}
    target: {type: sim, behavior: {duration_s: 5}}
    timeout_s: 60
    mutex_group: archive
"""


def test_each_collision_of_the_day_was_warned_and_the_quiet_tasks_were_not(tmp_path: Path) -> None:
    path = tmp_path / "conflicts.yaml"
    path.write_text(SMALL)

    predicted = scenario_preflight(load_scenario(path))
    warned = {task for w in predicted.warnings for task in w.tasks}
    assert warned == {"acme.load-a", "acme.load-b", "acme.sync"}  # archive's runs never meet
    assert [(w.kind, w.at.strftime("%H:%M")) for w in predicted.warnings if w.kind == "mutex"] == [
        ("mutex", "00:01"),
        ("mutex", "01:01"),
    ]

    figures = measure(path)
    # load-b waits for load-a each hour; sync's :03 run is skipped each hour
    assert figures["collisions_by_reason"] == {"mutex_busy": 2, "overlap_skipped": 2}
    assert (figures["collisions"], figures["predicted"], figures["hit_rate_pct"]) == (4, 4, 100.0)
    assert figures["warnings"] == 4 and figures["warnings_that_came_true"] == 4
    assert figures["unpredicted_runs"] == []
    assert figures["invariants_held"] is True
