"""``rebound runs heartbeat|complete|fail`` and progress in ``runs show``, against the local cloud."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from test_cli_harness import Cloud, cloud_fixture

from rebound.domain.run import RunState
from rebound.engine.async_attempts import completion_token
from rebound_cli.errors import EXIT_CONFLICT

pytestmark = pytest.mark.e2e
local_cloud = cloud_fixture()

TASK = {
    "id": "nightly-export",
    "tenant": "acme",
    "schedule": {"cron": "*/30 * * * *"},
    # a worker that never reports by itself: the CLI reports for it
    "target": {
        "type": "sim",
        "mode": "async",
        "behavior": {"async": {"duration": "30m", "stop_heartbeats_after": 0}},
    },
    "heartbeat_timeout": "10m",
    "max_duration": "1h",
}


def started(cloud: Cloud, tmp_path: Path) -> tuple[str, str]:
    file = tmp_path / "tasks.yaml"
    file.write_text(yaml.safe_dump({"tasks": [TASK]}))
    cloud.ok("tasks", "apply", "-f", str(file))
    cloud.run_for(timedelta(minutes=2))
    [run] = [r for r in cloud.runs().values() if r.state is RunState.RUNNING]
    return run.run_id, completion_token(cloud.deps, run)


def test_a_script_reports_progress_and_completion_and_a_second_completion_is_refused(
    local_cloud: Cloud, tmp_path: Path
) -> None:
    run_id, token = started(local_cloud, tmp_path)
    beat = local_cloud.ok("runs", "heartbeat", run_id, "--token", token, "--progress", "0.5")
    assert "heartbeat accepted" in beat.output
    shown = local_cloud.ok("runs", "show", run_id).output
    assert "progress" in shown and "50%" in shown

    done = local_cloud.json("runs", "complete", run_id, "--token", token)
    assert done["accepted"] and done["state"] == "succeeded"

    again = local_cloud.cli("runs", "complete", run_id, "--token", token)
    assert again.exit_code == EXIT_CONFLICT
    assert "refused (used)" in again.output
    assert local_cloud.runs()[run_id].state is RunState.SUCCEEDED
