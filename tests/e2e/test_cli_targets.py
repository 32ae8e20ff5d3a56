"""``rebound targets`` against the local cloud: a shared dependency goes down, Rebound stops
spending attempts on it, and the operator sees which target, its held runs, its probes and its
work order; once it is back and the held runs are released, the target leaves the list."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from test_cli_harness import Cloud, cloud_fixture

from rebound.domain.task import Task
from rebound.ops.tasks import TaskOps

pytestmark = pytest.mark.e2e

targets_cloud = cloud_fixture(transport="direct", name="targets_cloud")
BUDGET = {"threshold": 3, "min_runs": 2, "window": "5m", "probe_every": "2m", "release_per_minute": 5}


def test_an_outage_shows_in_targets_and_leaves_it_once_recovered(targets_cloud: Cloud) -> None:
    ops = TaskOps(targets_cloud.deps, "test")
    tasks = [
        Task.model_validate(
            {
                "id": f"sync-{i}",
                "tenant": "acme",
                "schedule": {"cron": "*/5 * * * *"},
                "target": {"type": "sim", "name": "db", "behavior": {"outage": {"after": 0, "for": "20m"}}},
                "retry_policy": {"target_budget": BUDGET},
            }
        )
        for i in range(4)
    ]
    ops.apply(ops.plan(tasks))
    targets_cloud.run_for(timedelta(minutes=8))

    result = targets_cloud.cli("-o", "json", "targets")
    assert result.exit_code == 0, result.output
    [db] = json.loads(result.stdout)
    assert db["target"] == "sim:db" and db["health"] == "unhealthy" and db["held"] >= 3
    assert db["work_order_id"]

    table = targets_cloud.cli("targets")
    assert table.exit_code == 0 and "sim:db" in table.output and "unhealthy" in table.output

    shown = targets_cloud.cli("-o", "json", "targets", "show", "sim:db")
    assert shown.exit_code == 0, shown.output
    detail = json.loads(shown.stdout)
    assert len(detail["held_runs"]) == db["held"]
    assert {r["task_id"].rsplit(".", 1)[-1] for r in detail["held_runs"]} <= {f"sync-{i}" for i in range(4)}
    assert detail["history"][-1]["action"] == "target-unhealthy"

    missing = targets_cloud.cli("targets", "show", "sim:nothing")
    assert missing.exit_code != 0 and "sim:nothing" in missing.output
    bad = targets_cloud.cli("targets", "show", "nothing")
    assert bad.exit_code != 0 and "http:<host>" in bad.output

    targets_cloud.run_for(timedelta(minutes=30))
    after = targets_cloud.cli("-o", "json", "targets")
    assert after.exit_code == 0 and json.loads(after.stdout) == []
    assert "every target is healthy" in targets_cloud.cli("-o", "table", "targets").output
