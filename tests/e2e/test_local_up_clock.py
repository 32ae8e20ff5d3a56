"""One clock: under ``rebound local up --time-scale 60`` the CLI reads the local cloud's clock.

``local up`` publishes its scaled clock in the environment's resources document; every command
that reads "now" (``tasks run``'s run id, ``health``'s ages, ``slo``, ``sla report``) reads it from
there, so schedule time agrees between the runtime and the operator. Without it the CLI stamped a
run with the wall clock while the runtime had run minutes ahead.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from test_local_up import CLI, ENV, REPO, UpProcess, _apply, _eventually, _free_port, _register_heartbeat

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpProcess]:
    server = UpProcess(_free_port(), tmp_path_factory.mktemp("up-clock"), "--no-console")
    try:
        yield server
    finally:
        server.kill()


def cli(up: UpProcess, *args: str) -> dict[str, object]:
    done = subprocess.run(
        [*CLI, "--env", "local", "-o", "json", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **ENV, "AWS_ENDPOINT_URL": up.endpoint},
        cwd=REPO,
        timeout=120,
    )
    assert done.returncode in (0, 1), done.stdout + done.stderr  # health exits 1 when not ok
    return dict(json.loads(done.stdout))


def test_up_publishes_its_clock_with_its_scale(up: UpProcess) -> None:
    clock = up.resources()["clock"]
    assert clock["scale"] == 60
    origin = datetime.fromisoformat(clock["origin"])
    assert abs(origin.timestamp() - clock["origin_epoch"]) < 60 * 60  # it started at the wall time


def test_a_run_asked_for_by_the_cli_is_stamped_with_the_cloud_s_time(up: UpProcess, tmp_path: Path) -> None:
    _register_heartbeat(up, tmp_path)
    before = datetime.now(UTC)
    run_id = str(cli(up, "tasks", "run", "acme.up-heartbeat")["run_id"])
    after = datetime.now(UTC)
    stamp = datetime.strptime(run_id.split(":manual-")[1][:16], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    cloud = up.resources()["clock"]

    def cloud_time(wall: datetime) -> datetime:
        """The cloud runs a minute per wall second from its start: seconds after it, minutes ahead."""
        return datetime.fromisoformat(cloud["origin"]) + timedelta(
            seconds=(wall.timestamp() - cloud["origin_epoch"]) * 60
        )

    assert stamp - after > timedelta(minutes=2)
    # Stamped while the CLI ran (its start takes seconds of wall time on a busy machine: minutes here).
    assert cloud_time(before) - timedelta(minutes=1) <= stamp <= cloud_time(after) + timedelta(minutes=1)


def test_health_ages_the_retry_worker_s_heartbeat_on_the_cloud_s_clock(up: UpProcess, tmp_path: Path) -> None:
    """The retry scheduler stamps its heartbeat with the cloud's time; a CLI on the wall clock
    said it "last ran -2410s ago"."""
    _apply(up, tmp_path, FAILING)

    def last_ran() -> str | None:
        checks = {c["name"]: c for c in cli(up, "health")["checks"]}  # type: ignore[attr-defined]
        found = re.search(r"last ran (\S+) ago", json.dumps(checks["retry_worker"]))
        return found.group(1) if found else None

    age = _eventually(last_ran, timeout=90)
    # The CLI works out the cloud's time from the wall clock at the cloud's scale (a minute a
    # second): a heartbeat stamped a fraction of a wall second after that reads a few seconds
    # ahead on a busy machine. On the wall clock it read 40 minutes ahead.
    if age.startswith("-"):
        assert age.endswith("s") and int(age[1:-1]) < 60, age


FAILING = """
tasks:
  - id: up-failing
    tenant: acme
    schedule: {cron: "* * * * *", timezone: UTC}
    target: {type: sim, behavior: {always_fail: true}}
"""
