"""Retry worker freshness: the retry scheduler records a heartbeat on every invocation, and
``health`` reports the worker stale only when work waits for it and the heartbeat is old.

These tests fail the worker after 5 minutes (``expected_interval``); ``test_health_options``
shows what the default of 30 minutes changes."""

from __future__ import annotations

from datetime import timedelta

import pytest

from rebound.domain.run import RunState
from rebound.domain.timefmt import iso
from rebound.engine.deps import Deps
from rebound.engine.health.checks import Check, HealthChecks, OldestAge, Status, Thresholds
from rebound.engine.retry_scheduler import HEARTBEAT_KEY
from rebound.handlers import executor, retry_scheduler
from support import Context, ManualClock, bus_event, fire, outbox_events, register, sqs_event, task

pytestmark = pytest.mark.integration
RUN_ID = "job:20260307T090000Z"
FIVE_MINUTES = Thresholds(expected_interval=timedelta(minutes=5))


def retry_worker(deps: Deps, oldest_age: OldestAge | None = None) -> Check:
    return HealthChecks(deps, oldest_age=oldest_age).retry_worker(deps.clock.now(), FIVE_MINUTES)


def fail_job(deps: Deps) -> dict:  # type: ignore[type-arg]
    """A run fails; its task.execution.failed event is on the retry queue, as the bus rule puts it."""
    register(deps, task("job", target={"type": "sim", "behavior": {"always_fail": True}}))
    executor.lambda_handler(sqs_event(fire("job")), Context())
    detail = [d for t, d in outbox_events(deps) if t == "task.execution.failed"][-1]
    deps.queues.send("retry", bus_event("task.execution.failed", detail))
    return detail  # type: ignore[no-any-return]


def beat(deps: Deps) -> None:
    """The retry scheduler is invoked (with an event about no run it knows: nothing else changes)."""
    event = bus_event("task.execution.failed", {"run_id": "nobody:20260307T090000Z", "attempt": 1})
    retry_scheduler.lambda_handler(sqs_event(event), Context())


def test_every_invocation_records_the_heartbeat(wired: Deps, clock: ManualClock) -> None:
    beat(wired)
    assert wired.store.get_key(HEARTBEAT_KEY) == {"pk": HEARTBEAT_KEY, "at": iso(clock.now())}
    clock.advance(90)
    detail = fail_job(wired)
    retry_scheduler.lambda_handler(sqs_event(bus_event("task.execution.failed", detail)), Context())
    assert wired.store.get_key(HEARTBEAT_KEY)["at"] == iso(clock.now())  # type: ignore[index]


def test_an_idle_system_is_ok_whatever_the_heartbeat(wired: Deps, clock: ManualClock) -> None:
    never = retry_worker(wired)
    assert never.status is Status.OK and "never ran" in never.summary

    beat(wired)
    clock.advance(3 * 86400)
    days = retry_worker(wired)
    assert days.status is Status.OK and "last ran 3.0d ago" in days.summary


def test_a_failure_that_just_happened_on_a_quiet_system_is_not_a_stale_worker(
    wired: Deps, clock: ManualClock
) -> None:
    beat(wired)
    clock.advance(3600)
    fail_job(wired)  # the worker has not had its second yet
    clock.advance(5)

    check = retry_worker(wired)
    assert check.status is Status.OK, check


def test_a_worker_that_is_not_invoked_while_work_waits_is_stale(wired: Deps, clock: ManualClock) -> None:
    beat(wired)
    fail_job(wired)
    clock.advance(6 * 60)
    # The sweeper decided the run (as it does after 2 minutes); the event still waits in the queue.
    run = wired.store.get_run(RUN_ID)
    assert run is not None and run.state is RunState.FAILED
    from rebound.engine.retry_scheduler import RetryScheduler

    RetryScheduler(wired, "sweeper").decide(run)

    stale = retry_worker(wired)
    assert stale.status is Status.FAIL
    assert stale.summary.startswith("retry worker stale: last ran 6m ago (limit 5m)")
    assert stale.details == ["retry queue: 1 message(s), more than the 0 run(s) that failed in the last 60s"]
    assert stale.value == 360.0

    # The same wait, with the age CloudWatch reports, and without a heartbeat at all.
    wired.store.release_key(HEARTBEAT_KEY)
    measured = retry_worker(wired, oldest_age=lambda name: 400.0)
    assert measured.status is Status.FAIL and "never ran" in measured.summary
    assert measured.details == ["retry queue: 1 message(s), the oldest waiting 7m"]
    young = retry_worker(wired, oldest_age=lambda name: 20.0)
    assert young.status is Status.OK

    beat(wired)  # the worker is back
    assert retry_worker(wired).status is Status.OK


def test_a_failed_run_waiting_past_the_grace_with_an_old_heartbeat_is_a_stale_worker(
    wired: Deps, clock: ManualClock
) -> None:
    beat(wired)
    clock.advance(600)
    fail_job(wired)
    clock.advance(90)

    stale = retry_worker(wired)
    assert stale.status is Status.FAIL
    assert stale.details[0] == f"{RUN_ID}: failed since {iso(clock.now() - timedelta(seconds=90))}"

    beat(wired)  # alive, and the run is only 90 s old: within failed_run_warn
    assert retry_worker(wired).status is Status.OK
    clock.advance(5 * 60)
    late = retry_worker(wired)  # alive, but nobody decides the run: the old check still fails
    assert late.status is Status.FAIL and "not picked up within 5m" in late.summary
