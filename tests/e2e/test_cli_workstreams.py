"""``rebound workstreams`` and ``rebound resources`` against the local cloud: the steps run as task
runs through the executor, the retry scheduler and dead-lettering; their ends come back through
the outbox, the bus and the escalation queue."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_cli_harness import Cloud, cloud_fixture

pytestmark = pytest.mark.e2e
local_cloud = cloud_fixture()
OPERATOR = "arn:aws:sts::123456789012:user/moto"


def document(transform: dict[str, Any]) -> dict[str, Any]:
    sim = {"type": "sim", "behavior": {"ok": True}}
    return {
        "tasks": [
            {"id": "extract", "tenant": "acme", "target": sim},
            {"id": "transform", "tenant": "acme", "target": {"type": "sim", "behavior": transform}},
            {"id": "load", "tenant": "acme", "target": sim},
            {"id": "report", "tenant": "acme", "target": sim},
        ],
        "workstreams": [
            {
                "id": "nightly-ledger",
                "tenant": "acme",
                "steps": [
                    {"task": "extract"},
                    {"task": "transform", "needs": ["extract"]},
                    {"task": "load", "needs": ["transform"], "resources": ["warehouse-write"]},
                    {"task": "report", "needs": ["load"], "critical": False},
                ],
            }
        ],
        "resources": [{"id": "warehouse-write", "max_holders": 1}],
    }


def apply(cloud: Cloud, path: Path, transform: dict[str, Any]) -> None:
    path.write_text(yaml.safe_dump(document(transform)))
    cloud.ok("tasks", "apply", "-f", str(path), "--yes")
    cloud.ok("workstreams", "apply", str(path))


def test_a_cycle_is_refused_with_its_path(local_cloud: Cloud, tmp_path: Path) -> None:
    data = document({"ok": True})
    data["workstreams"][0]["steps"][0]["needs"] = ["load"]
    path = tmp_path / "cycle.yaml"
    path.write_text(yaml.safe_dump(data))
    result = local_cloud.cli("workstreams", "apply", str(path))
    assert result.exit_code == 2
    assert "workstreams[0].steps" in result.output and "extract → load → transform → extract" in result.output


def test_a_failed_step_dead_letters_then_rollback_and_resume_complete_the_workstream(
    local_cloud: Cloud, tmp_path: Path
) -> None:
    path = tmp_path / "tasks.yaml"
    apply(local_cloud, path, {"always_fail": True})
    started = local_cloud.json("workstreams", "run", "nightly-ledger", "--token", "night-1")
    run_id = started["run_id"]
    local_cloud.run_for(timedelta(hours=3))

    failed = local_cloud.json("workstreams", "show", run_id)
    states = {s["step"]: s["state"] for s in failed["steps"]}
    assert failed["state"] == "failed"
    assert states == {"extract": "succeeded", "transform": "failed", "load": "blocked", "report": "blocked"}
    transform_run = local_cloud.runs()[next(s["run_id"] for s in failed["steps"] if s["step"] == "transform")]
    assert transform_run.state.value == "dead_lettered" and transform_run.attempt > 1, (
        "retried, then dead-lettered"
    )
    critical = local_cloud.json("workorders", "list", "--severity", "critical")
    assert [o["subject"] for o in critical] == [f"workstream#{run_id}#failed"]

    text = local_cloud.ok("workstreams", "show", run_id).stdout
    assert "✖ transform" in text and "■ load" in text
    assert "graph LR" in local_cloud.ok("workstreams", "show", run_id, "--output", "mermaid").stdout
    assert "digraph" in local_cloud.ok("workstreams", "show", run_id, "--output", "dot").stdout

    checkpoints = local_cloud.json("workstreams", "checkpoints", run_id)
    assert [c["version"] for c in checkpoints] == list(range(1, len(checkpoints) + 1))
    assert checkpoints[0]["running"] == ["extract"] and checkpoints[-1]["failed"] == ["transform"]
    apply(local_cloud, path, {"ok": True})  # the operator fixes transform's target
    rolled = local_cloud.json("workstreams", "rollback", run_id, "--to", "1", "--yes")
    assert rolled["state"] == "rolled_back"
    assert {s["step"]: s["state"] for s in rolled["steps"]} == {
        "extract": "succeeded",  # completed after checkpoint 1: kept, and said so
        "transform": "pending",
        "load": "pending",
        "report": "pending",
    }
    assert "never rolled back" in rolled["not_rolled_back"]["extract"]
    resumed = local_cloud.json("workstreams", "resume", run_id)
    assert resumed["started_steps"] == ["transform"]
    local_cloud.run_for(timedelta(minutes=30))

    done = local_cloud.json("workstreams", "show", run_id)
    assert done["state"] == "completed"
    assert json.loads(local_cloud.ok("workstreams", "show", run_id, "--output", "json").stdout) == done
    assert {s["step"]: s["state"] for s in done["steps"]} == dict.fromkeys(
        ["extract", "transform", "load", "report"], "succeeded"
    )
    trail = local_cloud.deps.store.audit_trail(f"workstream#{run_id}")
    assert [r.action for r in trail if r.actor == OPERATOR] == ["started", "rolled-back", "resumed"]
    [verified] = local_cloud.json("audit", "verify", f"workstream#{run_id}")
    assert verified["ok"] is True
    listed = local_cloud.json("workstreams", "list")
    assert listed[0]["last_run"] == run_id and listed[0]["last_state"] == "completed"
    assert local_cloud.json("resources", "list") == [
        {"resource": "warehouse-write", "max_holders": 1, "holders": [], "other_holders": 0}
    ]
    assert local_cloud.json("resources", "set-limit", "warehouse-write", "2") == {"warehouse-write": 2}
