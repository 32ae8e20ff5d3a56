"""``rebound runs`` against the local cloud, on runs the real loop produced under virtual time."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_cli_harness import Cloud, cloud_fixture

from rebound.domain.run import RunState

pytestmark = pytest.mark.e2e
local_cloud_base = cloud_fixture(name="local_cloud_base")
OPERATOR = "arn:aws:sts::123456789012:user/moto"
LEDGER_RUN = "globex.export-ledger:20260307T090500Z"

TASKS: list[dict[str, Any]] = [
    {
        "id": "heartbeat",
        "tenant": "acme",
        "schedule": {"cron": "*/10 * * * *"},
        "target": {"type": "sim", "behavior": {"ok": True}},
    },
    {
        "id": "export-ledger",
        "tenant": "globex",
        "schedule": {"cron": "5 9 * * *"},
        "target": {"type": "sim", "behavior": {"always_fail": True}},
    },
    {
        "id": "flaky-export",
        "tenant": "globex",
        "schedule": {"cron": "*/10 * * * *"},
        "target": {"type": "sim", "behavior": {"terminal_error": "BAD_INPUT"}},
    },
    {
        "id": "slow-retry",
        "tenant": "acme",
        "schedule": {"cron": "0 9 * * *"},
        "target": {"type": "sim", "behavior": {"always_fail": True}},
        "retry_policy": {"extends": "default", "base_delay": "30m", "max_delay": "1h"},
    },
]


@pytest.fixture(scope="module")
def local_cloud(local_cloud_base: Cloud, tmp_path_factory: pytest.TempPathFactory) -> Cloud:
    """The demo's shape: healthy, recovering and failing tasks, after 36 minutes of schedule time."""
    file = tmp_path_factory.mktemp("runs") / "tasks.yaml"
    file.write_text(yaml.safe_dump({"tasks": TASKS}))
    local_cloud_base.ok("tasks", "apply", "-f", str(file))
    local_cloud_base.run_for(timedelta(minutes=36))
    local_cloud_base.tick(31)  # the sweeper's last look at the DLQ hid its messages for 30 s
    return local_cloud_base


def fix_task(cloud: Cloud, task_id: str, tmp: Path) -> None:
    """The operator fixes the target (here: the simulated one now succeeds)."""
    fixed = [
        {**t, "target": {"type": "sim", "behavior": {"ok": True}}} if t["id"] == task_id else t for t in TASKS
    ]
    (tmp / "fixed.yaml").write_text(yaml.safe_dump({"tasks": fixed}))
    cloud.ok("tasks", "apply", "-f", str(tmp / "fixed.yaml"), "--yes")


def test_list_filters_by_task_status_and_time(local_cloud: Cloud) -> None:
    dead = local_cloud.json("runs", "list", "--status", "dead_lettered")
    assert LEDGER_RUN in {r["run_id"] for r in dead}
    assert {r["task_id"] for r in dead} == {"globex.export-ledger", "globex.flaky-export"}

    recent = local_cloud.json("runs", "list", "--task", "acme.heartbeat", "--since", "2026-03-07T09:15:00Z")
    assert [r["run_id"] for r in recent] == [
        "acme.heartbeat:20260307T093000Z",
        "acme.heartbeat:20260307T092000Z",
    ]
    assert all(r["state"] == "succeeded" for r in recent)

    relative = local_cloud.json("runs", "list", "--task", "acme.heartbeat", "--since", "20m")
    assert [r["run_id"] for r in relative] == [
        "acme.heartbeat:20260307T093000Z",
        "acme.heartbeat:20260307T092000Z",
    ]

    table = local_cloud.ok("runs", "list", "--status", "dead_lettered")
    assert LEDGER_RUN in table.stdout


def test_show_is_one_correlated_timeline(local_cloud: Cloud) -> None:
    shown = local_cloud.json("runs", "show", LEDGER_RUN)

    steps = [(e["source"], e["action"]) for e in shown["timeline"]]
    assert steps[0] == ("trigger", "schedule-fired")
    assert steps.count(("run", "attempt-failed")) == 3
    assert steps.count(("run", "retry-scheduled")) == 2
    for step in [
        ("run", "dead-lettered"),
        ("run", "dlq-message-sent"),
        ("workorder", "opened"),
        ("workorder", "notified"),
        ("dlq", "message-in-dlq"),
    ]:
        assert step in steps, step
    assert [e["at"] for e in shown["timeline"]] == sorted(e["at"] for e in shown["timeline"])
    failed = next(e for e in shown["timeline"] if e["action"] == "attempt-failed")
    assert (
        failed["detail"]["error_code"] == "SIM_FAILURE"
        and "always fails" in failed["detail"]["error_message"]
    )
    # Each attempt names the queue delivery that carried it: message id and SQS receive count.
    started = [e for e in shown["timeline"] if e["action"] == "attempt-started"]
    assert len(started) == 3
    for entry in started:
        delivery = entry["detail"]["delivery"]
        assert delivery["message_id"] and delivery["receive_count"] >= 1
    assert len({e["detail"]["delivery"]["message_id"] for e in started}) == 3  # a new message per retry
    assert shown["audit"]["ok"] is True
    assert shown["work_order"]["state"] == "open"
    assert shown["dlq_message"]["run_id"] == LEDGER_RUN

    table = local_cloud.ok("-o", "table", "runs", "show", LEDGER_RUN, "--no-dlq")
    assert "timeline" in table.stdout and "dead-lettered" in table.stdout


def test_retry_replays_with_a_fresh_budget_and_the_operator_as_actor(
    local_cloud: Cloud, tmp_path: Path
) -> None:
    fix_task(local_cloud, "export-ledger", tmp_path)

    outcome = local_cloud.json("runs", "retry", LEDGER_RUN, "--reason", "ledger service fixed")

    assert outcome["action"] == "replayed" and outcome["state"] == "replayed"
    record = local_cloud.deps.store.audit_trail(f"run#{LEDGER_RUN}")[-1]
    assert record.action == "replayed" and record.actor == OPERATOR
    assert record.evidence["via"] == "cli-retry" and record.evidence["fresh_budget_from_attempt"] == 4
    assert record.evidence["reason"] == "ledger service fixed"
    assert record.evidence["dlq_message_id"]  # so a later redrive knows that message was handled

    local_cloud.run_for(timedelta(minutes=2))
    run = local_cloud.runs()[LEDGER_RUN]
    assert run.state is RunState.SUCCEEDED and run.attempt == 4 and run.budget_start == 3

    again = local_cloud.cli("runs", "retry", LEDGER_RUN)
    assert again.exit_code == 5
    assert again.stderr.strip().startswith(f"error: run {LEDGER_RUN} is succeeded; only dead_lettered")


def test_retry_of_a_waiting_run_dispatches_its_next_attempt_now(local_cloud: Cloud) -> None:
    waiting = local_cloud.runs()["acme.slow-retry:20260307T090000Z"]
    assert waiting.state is RunState.RETRY_SCHEDULED and waiting.next_retry_at is not None
    assert waiting.next_retry_at - local_cloud.clock.now() > timedelta(minutes=20)  # a long wait

    outcome = local_cloud.json("runs", "retry", waiting.run_id)
    local_cloud.run_for(timedelta(seconds=30))

    assert outcome["action"] == "dispatched"
    run = local_cloud.runs()[waiting.run_id]
    assert run.attempt == waiting.attempt + 1
    actions = [r.action for r in local_cloud.deps.store.audit_trail(f"run#{waiting.run_id}")]
    assert actions[actions.index("retry-now") + 1] == "attempt-started"


def test_skip_and_cancel_need_a_reason_confirm_and_resolve_the_work_order(local_cloud: Cloud) -> None:
    dead = [
        r["run_id"]
        for r in local_cloud.json(
            "runs", "list", "--task", "globex.flaky-export", "--status", "dead_lettered"
        )
    ]
    first, second = dead[0], dead[1]

    no_reason = local_cloud.cli("runs", "skip", first, "--yes")
    assert no_reason.exit_code == 2 and "--reason" in no_reason.output
    declined = local_cloud.cli("runs", "skip", first, "--reason", "dup", input="n\n")
    assert declined.exit_code == 1 and local_cloud.runs()[first].state is RunState.DEAD_LETTERED

    skipped = local_cloud.json("runs", "skip", first, "--reason", "superseded by the next run", input="y\n")
    cancelled = local_cloud.json("runs", "cancel", second, "--reason", "would double-book", "--yes")

    assert skipped["state"] == "skipped" and cancelled["state"] == "cancelled"
    for run_id, resolution in [(first, "skipped"), (second, "cancelled")]:
        order = local_cloud.json("workorders", "show", local_cloud.runs()[run_id].work_order_id)
        assert order["state"] == "resolved" and order["resolution"] == resolution
        assert order["resolved_by"] == OPERATOR
    record = local_cloud.deps.store.audit_trail(f"run#{first}")[-1]
    assert record.action == "skipped" and record.evidence["reason"] == "superseded by the next run"

    closed = local_cloud.cli("runs", "cancel", first, "--reason", "again", "--yes")
    assert closed.exit_code == 5 and "is skipped already" in closed.stderr


def test_retry_failed_replays_every_dead_lettered_run_of_a_task(local_cloud: Cloud) -> None:
    dead = {
        r["run_id"]
        for r in local_cloud.json(
            "runs", "list", "--task", "globex.flaky-export", "--status", "dead_lettered"
        )
    }
    assert len(dead) >= 2

    declined = local_cloud.cli("runs", "retry-failed", "--task", "globex.flaky-export", input="n\n")
    assert declined.exit_code == 1
    outcomes = local_cloud.json("runs", "retry-failed", "--task", "globex.flaky-export", "--yes")

    assert {o["run_id"] for o in outcomes} == dead and {o["action"] for o in outcomes} == {"replayed"}
    assert all(local_cloud.runs()[run_id].state is RunState.REPLAYED for run_id in dead)
    nothing = local_cloud.json("runs", "retry-failed", "--task", "globex.flaky-export", "--yes")
    assert nothing == []
    usage = local_cloud.cli("runs", "retry-failed", "--yes")
    assert usage.exit_code == 2 and "give --task or --since" in usage.stderr


def dead_lettered_within(cloud: Cloud, run_id: str, limit: timedelta) -> None:
    """Let schedule time pass, half an hour at a time, until the run is dead-lettered (or ``limit``)."""
    end = cloud.clock.now() + limit
    while cloud.runs()[run_id].state is not RunState.DEAD_LETTERED:
        assert cloud.clock.now() < end, f"{run_id} not dead-lettered within {limit}"
        cloud.run_for(timedelta(minutes=30))


def test_retry_overrides_apply_to_the_new_budget_only(local_cloud: Cloud) -> None:
    """Last in the module: it lets hours of schedule time pass, with the other tasks paused (their
    runs and work orders every 10 minutes would be most of its work)."""
    run_id = "acme.slow-retry:20260307T090000Z"
    for other in ("acme.heartbeat", "globex.flaky-export", "globex.export-ledger"):
        local_cloud.ok("tasks", "pause", other, "--reason", "not what this test watches", "--yes")
    dead_lettered_within(local_cloud, run_id, timedelta(hours=3))

    outcome = local_cloud.json("runs", "retry", run_id, "--timeout", "120", "--max-attempts", "5")
    dead_lettered_within(local_cloud, run_id, timedelta(hours=5))

    assert outcome["overrides"] == {"timeout_s": 120, "max_attempts": 5}
    trail = local_cloud.deps.store.audit_trail(f"run#{run_id}")
    replay = [r for r in trail if r.action == "replayed"][-1]
    assert replay.evidence["overrides"] == {"timeout_s": 120, "max_attempts": 5}
    started = [r for r in trail if r.action == "attempt-started" and r.seq > replay.seq]
    assert len(started) == 5 and all(r.evidence["deadline_s"] == 120 for r in started)
    run = local_cloud.runs()[run_id]
    assert run.state is RunState.DEAD_LETTERED and run.attempt - run.budget_start == 5
