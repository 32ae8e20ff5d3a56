"""The retry health report's options: ``expected_interval_minutes`` decides when the retry worker
checks fail, ``stale_metadata_minutes`` when stale retry plans and unstarted replays do, and
``generated_by`` is echoed with ``generated_at``. Paused tasks show under disabled schedules."""

from __future__ import annotations

from typing import Any

import boto3
import pytest

from rebound.domain.errors import ValidationFailed
from rebound.domain.run import RunState
from rebound.domain.task import TaskState
from rebound.domain.timefmt import iso
from rebound.engine.deps import Deps
from rebound.engine.health.checks import HealthChecks, RetryHealthQuery, RetryHealthReport, Status
from rebound.engine.retry_scheduler import RetryScheduler
from rebound.handlers import executor
from rebound.ops.common import validated
from rebound.ops.runs import RunOps
from rebound.ops.tasks import TaskOps
from support import Context, ManualClock, fire, register, sqs_event, task

pytestmark = pytest.mark.integration
RUN_ID = "job:20260307T090000Z"
ALWAYS_FAIL = {"type": "sim", "behavior": {"always_fail": True}}


def verdict(deps: Deps, check: str, **query: Any) -> Status:
    return HealthChecks(deps).retry_health(RetryHealthQuery(**query)).check(check).status


def fail_job(deps: Deps, **overrides: Any) -> None:
    register(deps, task("job", target=ALWAYS_FAIL, **overrides))
    executor.lambda_handler(sqs_event(fire("job")), Context())
    run = deps.store.get_run(RUN_ID)
    assert run is not None and run.state is RunState.FAILED


def test_the_report_echoes_its_options_and_who_asked(wired: Deps, clock: ManualClock) -> None:
    report = HealthChecks(wired).retry_health(RetryHealthQuery(generated_by="deploy-gate"))
    data = report.as_dict()

    assert data["generated_by"] == "deploy-gate" and data["generated_at"] == iso(clock.now())
    assert (data["expected_interval_minutes"], data["stale_metadata_minutes"]) == (30, 120)
    assert data["status"] == "ok" and data["healthy"] is True and data["environment"] == "test"
    assert [c["name"] for c in data["checks"]] == [
        "retry_worker", "stale_retry_plans", "stuck_replays", "failed_retry_executions",
        "disabled_schedules", "acknowledgement_gaps", "dlq_age",
    ]  # fmt: skip
    assert RetryHealthReport.model_validate(data) == report  # what a route returns, and reads back

    asked = HealthChecks(wired).retry_health(
        RetryHealthQuery(expected_interval_minutes=10, stale_metadata_minutes=45)
    )
    assert (asked.expected_interval_minutes, asked.stale_metadata_minutes, asked.generated_by) == (
        10,
        45,
        None,
    )


@pytest.mark.parametrize(
    ("query", "field", "problem"),
    [
        ({"expected_interval_minutes": 0}, "expected_interval_minutes", "greater than or equal to 1"),
        ({"stale_metadata_minutes": "soon"}, "stale_metadata_minutes", "valid integer"),
        ({"stale_metadata_minutes": 10081}, "stale_metadata_minutes", "less than or equal to 10080"),
        ({"generated_by": "x" * 300}, "generated_by", "at most 256 characters"),
        ({"expected_interval": 5}, "expected_interval", "unknown field"),
    ],
)
def test_a_bad_option_is_rejected_naming_its_field(query: dict[str, Any], field: str, problem: str) -> None:
    with pytest.raises(ValidationFailed) as caught:
        validated(RetryHealthQuery, query)
    assert caught.value.details["key_path"] == field
    assert caught.value.message.startswith(f"{field}: ") and problem in caught.value.message
    assert caught.value.details["errors"][0]["field"] == field


def test_expected_interval_decides_when_an_undecided_failed_run_fails(
    wired: Deps, clock: ManualClock
) -> None:
    fail_job(wired)  # its task.execution.failed event never reaches the retry worker
    clock.advance(6 * 60)
    RetryScheduler(wired).heartbeat()  # the worker runs, but nobody decides the run

    report = HealthChecks(wired).retry_health(RetryHealthQuery())
    worker = report.check("retry_worker")
    assert worker.status is Status.WARN and report.healthy
    assert worker.summary.startswith("1 failed run(s) not picked up within 5m (fails after 30m); oldest 6m")
    assert verdict(wired, "retry_worker", expected_interval_minutes=5) is Status.FAIL
    assert verdict(wired, "retry_worker", expected_interval_minutes=7) is Status.WARN

    clock.advance(25 * 60)
    RetryScheduler(wired).heartbeat()
    assert verdict(wired, "retry_worker") is Status.FAIL  # 31 minutes: past the default too


def test_expected_interval_decides_when_a_silent_worker_fails(wired: Deps, clock: ManualClock) -> None:
    RetryScheduler(wired).heartbeat()
    wired.queues.send("retry", {"detail-type": "task.execution.failed", "detail": {}})  # waits for it
    clock.advance(6 * 60)

    worker = HealthChecks(wired).retry_health(RetryHealthQuery()).check("retry_worker")
    assert worker.status is Status.WARN
    assert worker.summary.startswith(
        "retry worker slow: last ran 6m ago while work waits for it (stale after 30m)"
    )
    stale = (
        HealthChecks(wired).retry_health(RetryHealthQuery(expected_interval_minutes=5)).check("retry_worker")
    )
    assert stale.status is Status.FAIL and stale.summary.startswith(
        "retry worker stale: last ran 6m ago (limit 5m)"
    )

    clock.advance(25 * 60)
    assert verdict(wired, "retry_worker") is Status.FAIL
    RetryScheduler(wired).heartbeat()  # it runs again
    assert verdict(wired, "retry_worker", expected_interval_minutes=5) is Status.OK


def test_stale_metadata_decides_when_an_overdue_retry_plan_fails(wired: Deps, clock: ManualClock) -> None:
    fail_job(wired, retry_policy={"extends": "default", "base_delay": "20m", "max_delay": "1h"})
    RetryScheduler(wired).on_failed(RUN_ID, 1)
    run = wired.store.get_run(RUN_ID)
    assert run is not None and run.state is RunState.RETRY_SCHEDULED and run.next_retry_at is not None
    clock.set(run.next_retry_at)
    clock.advance(16 * 60)  # nothing sends attempt 2

    plans = HealthChecks(wired).retry_health(RetryHealthQuery()).check("stale_retry_plans")
    assert plans.status is Status.WARN
    assert plans.summary == "1 retry plan(s) overdue; worst by 16m (stale after 2.0h)"
    assert verdict(wired, "stale_retry_plans", stale_metadata_minutes=15) is Status.FAIL
    assert verdict(wired, "stale_retry_plans", stale_metadata_minutes=17) is Status.WARN
    assert verdict(wired, "stale_retry_plans", expected_interval_minutes=1) is Status.WARN  # not its limit

    clock.advance(105 * 60)
    assert verdict(wired, "stale_retry_plans") is Status.FAIL  # 121 minutes overdue


def test_stale_metadata_decides_when_an_unstarted_replay_fails(wired: Deps, clock: ManualClock) -> None:
    fail_job(wired, retry_policy={"extends": "default", "max_attempts": 1})
    RetryScheduler(wired).on_failed(RUN_ID, 1)
    RunOps(wired, "operator").retry(RUN_ID, reason="try again")
    clock.advance(11 * 60)  # the replay waits on the execution queue; nothing runs it

    replays = HealthChecks(wired).retry_health(RetryHealthQuery()).check("stuck_replays")
    assert replays.status is Status.WARN
    assert replays.summary.startswith(
        "1 replayed run(s) never started, the oldest for 11m (stale after 2.0h)"
    )
    assert verdict(wired, "stuck_replays", stale_metadata_minutes=10) is Status.FAIL
    assert verdict(wired, "stuck_replays", stale_metadata_minutes=12) is Status.WARN
    assert (
        verdict(wired, "stuck_replays", stale_metadata_minutes=12, expected_interval_minutes=1) is Status.WARN
    )


def test_paused_tasks_count_under_disabled_schedules(wired: Deps, clock: ManualClock) -> None:
    register(wired, task("job"), task("other"))
    TaskOps(wired, "operator").set_state("job", TaskState.PAUSED, reason="maintenance")

    schedules = HealthChecks(wired).retry_health(RetryHealthQuery()).check("disabled_schedules")
    assert schedules.status is Status.OK
    assert schedules.summary == "every active task's schedules are enabled; 1 task(s) paused"
    assert schedules.details == [f"task job: paused since {iso(clock.now())} (task-job)"]

    # Someone enables the paused task's schedule behind Rebound's back.
    scheduler = boto3.client("scheduler", region_name="us-east-1")
    live = scheduler.get_schedule(Name="task-job", GroupName=wired.settings.schedule_group)
    keep = ("Name", "GroupName", "ScheduleExpression", "FlexibleTimeWindow", "Target")
    scheduler.update_schedule(**{k: live[k] for k in keep}, State="ENABLED")

    drifted = HealthChecks(wired).retry_health(RetryHealthQuery()).check("disabled_schedules")
    assert drifted.status is Status.WARN
    assert drifted.details[0] == "task-job: ENABLED while task job is paused"
