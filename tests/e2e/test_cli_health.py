"""``rebound health`` against the local cloud: each check goes non-ok on the state it watches, the
command exits 3 while it does, and 0 once the problem is handled.

The tests run in order on one cloud and virtual clock: each leaves the loop healthy for the next.
``tick`` moves time while nothing runs (so plans go overdue, replays stay unstarted, messages age);
``run_for`` lets the whole system run.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import yaml
from test_cli_harness import Cloud, cloud_fixture

from rebound.domain.run import RunState
from rebound.engine.retry_scheduler import HEARTBEAT_KEY

pytestmark = pytest.mark.e2e
base = cloud_fixture(name="base")
SLOW_RUN = "acme.slow:20260307T090000Z"
ONCE_RUN = "acme.once:20260307T090000Z"

TASKS: list[dict[str, Any]] = [
    {  # retries 20 minutes apart (one-time schedules)
        "id": "slow",
        "tenant": "acme",
        "schedule": {"cron": "0 9 * * *"},
        "target": {"type": "sim", "behavior": {"always_fail": True}},
        "retry_policy": {"extends": "default", "base_delay": "20m", "max_delay": "1h"},
    },
    {  # dead-lettered on its first failure
        "id": "once",
        "tenant": "acme",
        "schedule": {"cron": "0 9 * * *"},
        "target": {"type": "sim", "behavior": {"always_fail": True}},
        "retry_policy": {"extends": "default", "max_attempts": 1},
    },
]


@pytest.fixture(scope="module")
def local_cloud(base: Cloud, tmp_path_factory: pytest.TempPathFactory) -> Cloud:
    file = tmp_path_factory.mktemp("health") / "tasks.yaml"
    file.write_text(yaml.safe_dump({"tasks": TASKS}))
    base.ok("tasks", "apply", "-f", str(file))
    base.run_for(timedelta(minutes=2))
    runs = base.runs()
    assert runs[SLOW_RUN].state is RunState.RETRY_SCHEDULED
    assert runs[ONCE_RUN].state is RunState.DEAD_LETTERED
    return base


def ack_all(cloud: Cloud) -> None:
    """Acknowledge every open work order, so acknowledgement_gaps stays out of the way."""
    for order in cloud.json("workorders", "list", "--state", "open"):
        cloud.ok("workorders", "ack", order["work_order_id"], "--note", "on it")


def health(cloud: Cloud, *options: str) -> tuple[int, dict[str, dict[str, Any]]]:
    result = cloud.cli("-o", "json", "health", *options)
    assert result.exit_code in (0, 3), (result.exit_code, result.output)
    report = json.loads(result.stdout)
    assert report["healthy"] is (result.exit_code == 0)
    return result.exit_code, {c["name"]: c for c in report["checks"]}


def failing(checks: dict[str, dict[str, Any]]) -> set[str]:
    return {name for name, check in checks.items() if check["status"] == "fail"}


def test_a_healthy_loop_exits_0_with_a_fresh_retry_worker(local_cloud: Cloud) -> None:
    ack_all(local_cloud)
    code, checks = health(local_cloud)

    assert code == 0 and failing(checks) == set()
    worker = checks["retry_worker"]
    assert worker["status"] == "ok" and worker["summary"].startswith("worker last ran ")
    assert local_cloud.deps.store.get_key(HEARTBEAT_KEY) is not None

    # The three options, and --output after the command.
    asked = local_cloud.cli(
        "health", "--expected-interval-minutes", "10", "--stale-metadata-minutes", "45",
        "--generated-by", "deploy-gate", "--output", "json",
    )  # fmt: skip
    report = json.loads(asked.stdout)
    assert asked.exit_code == 0 and report["generated_by"] == "deploy-gate"
    assert (report["expected_interval_minutes"], report["stale_metadata_minutes"]) == (10, 45)
    assert report["generated_at"] == local_cloud.clock.now().strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    assert json.loads(local_cloud.ok("health", "--json").stdout)["generated_by"] == "rebound-cli"
    table = local_cloud.ok("-o", "table", "health").stdout
    assert "(expected interval 30m, stale metadata 120m)" in table

    bad = local_cloud.cli("health", "--stale-metadata-minutes", "0")
    assert bad.exit_code == 2
    assert bad.stderr.strip() == (
        "error: --stale-metadata-minutes: Input should be greater than or equal to 1 [VALIDATION_FAILED]"
    )


def test_an_overdue_retry_plan_fails_stale_retry_plans(local_cloud: Cloud) -> None:
    due = local_cloud.runs()[SLOW_RUN].next_retry_at
    assert due is not None
    local_cloud.tick((due - local_cloud.clock.now()).total_seconds() + 16 * 60)  # nothing dispatches it

    code, checks = health(local_cloud)  # overdue, but within the default 120 minutes of stale metadata
    assert code == 0 and checks["stale_retry_plans"]["status"] == "warn"
    code, checks = health(local_cloud, "--stale-metadata-minutes", "15")
    assert code == 3 and failing(checks) == {"stale_retry_plans"}
    stale = checks["stale_retry_plans"]
    assert stale["summary"] == "1 retry plan(s) overdue; worst by 16m (stale after 15m)"
    # the plan's own time, to the millisecond (the attempt ends a few virtual milliseconds after 09:00)
    when = f"{due:%Y-%m-%dT%H:%M:%S}.{due.microsecond // 1000:03d}Z"
    assert stale["details"] == [f"{SLOW_RUN}: attempt 2 was due {when}"]

    # The runbook's step: send the next attempt now.
    local_cloud.ok("runs", "retry", SLOW_RUN, "--reason", "plan overdue")
    code, checks = health(local_cloud)
    assert code == 0 and checks["stale_retry_plans"]["status"] == "ok"
    local_cloud.run_for(timedelta(minutes=1))
    assert local_cloud.runs()[SLOW_RUN].attempt == 2


def test_a_replay_that_never_starts_fails_stuck_replays(local_cloud: Cloud) -> None:
    local_cloud.ok("runs", "retry", ONCE_RUN, "--reason", "try again")
    local_cloud.tick(11 * 60)  # the replay message waits; nothing runs it

    code, checks = health(local_cloud)
    assert code == 0 and checks["stuck_replays"]["status"] == "warn"
    code, checks = health(local_cloud, "--stale-metadata-minutes", "10")
    assert code == 3 and failing(checks) == {"stuck_replays"}
    assert checks["stuck_replays"]["details"][0].startswith(f"{ONCE_RUN}: replayed ")

    local_cloud.run_for(timedelta(minutes=1))  # it starts (and fails again, into the DLQ)
    ack_all(local_cloud)
    code, checks = health(local_cloud)
    assert code == 0 and checks["stuck_replays"]["status"] == "ok"


@pytest.fixture
def dead_retry_worker(local_cloud: Cloud) -> Iterator[None]:
    """The retry scheduler is never invoked (its event source mapping disabled, say)."""
    runtime = local_cloud.stack.runtime
    mapping = next(m for m in runtime.mappings if m.spec.logical == "retry_scheduler")
    runtime.mappings.remove(mapping)
    try:
        yield
    finally:
        runtime.mappings.append(mapping)


def test_a_retry_worker_that_is_not_invoked_fails_even_though_the_sweeper_covers_for_it(
    local_cloud: Cloud, dead_retry_worker: None
) -> None:
    local_cloud.ok("runs", "retry", SLOW_RUN, "--reason", "last attempt now")
    local_cloud.run_for(timedelta(minutes=6))

    # The sweeper decided the failed run (no `failed` run is left), but its event waits in the
    # retry queue and the worker's heartbeat is old.
    assert local_cloud.runs()[SLOW_RUN].state is RunState.DEAD_LETTERED
    ack_all(local_cloud)
    code, checks = health(local_cloud)  # 6 minutes: slow, within the default 30-minute interval
    assert code == 0 and checks["retry_worker"]["status"] == "warn"
    assert checks["retry_worker"]["summary"].startswith("retry worker slow: last ran ")
    code, checks = health(local_cloud, "--expected-interval-minutes", "5")
    assert code == 3 and failing(checks) == {"retry_worker"}
    worker = checks["retry_worker"]
    assert worker["summary"].startswith("retry worker stale: last ran ")
    assert "(limit 5m) while work waits for it; retry queue holds 1 visible" in worker["summary"]
    assert worker["details"] == [
        "retry queue: 1 message(s), more than the 0 run(s) that failed in the last 60s"
    ]
    assert worker["value"] > 300


def test_the_retry_worker_is_fresh_again_once_it_is_invoked(local_cloud: Cloud) -> None:
    local_cloud.run_for(timedelta(minutes=1))  # the mapping is back: it takes the waiting event

    code, checks = health(local_cloud)
    assert code == 0 and checks["retry_worker"]["status"] == "ok"
    assert checks["retry_worker"]["summary"].startswith("worker last ran ")


def test_a_dlq_message_close_to_retention_fails_dlq_age(local_cloud: Cloud) -> None:
    ack_all(local_cloud)
    code, checks = health(local_cloud)
    assert code == 0 and checks["dlq_age"]["status"] == "warn"  # waiting is someone's work order

    local_cloud.tick(11 * 86400)  # nobody recovers them for 11 days
    code, checks = health(local_cloud)
    assert code == 3 and failing(checks) == {"dlq_age"}
    age = checks["dlq_age"]
    assert age["value"] > 10 * 86400
    assert age["details"] == [
        "archive what must outlive retention: rebound dlq archive --older-than 7d --delete"
    ]

    # The runbook's step: archive them before SQS deletes them.
    local_cloud.tick(61)  # the health check's sample of the DLQ may hide its messages for 60 s
    archived = local_cloud.ok("dlq", "archive", "--older-than", "7d", "--delete", "--yes")
    assert "3 archived" in archived.stdout and "3 removed from the DLQ" in archived.stdout
    code, checks = health(local_cloud)
    assert code == 0 and checks["dlq_age"]["status"] == "ok"
