"""Scheduling guarantees at the executor and the sweeper: overlap, mutual exclusion, tenant quotas,
stagger, SLA, pause and resume, and the run ledger."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from rebound.domain.models import AttemptOutcome, RunState, TaskState, TenantSettings
from rebound.engine import sla
from rebound.engine.deps import Deps
from rebound.engine.executor import Executor, QueueMessage
from rebound.engine.ledger import Ledger
from rebound.engine.sweeper import Sweeper
from rebound.handlers import escalation
from rebound.ops.tasks import TaskOps
from rebound_local.instrument import CrashPlan, SimulatedCrash
from support import (
    Context,
    ManualClock,
    bus_event,
    fire,
    outbox_events,
    queue_messages,
    register,
    sqs_event,
    task,
)

pytestmark = pytest.mark.integration


def start_and_crash(deps: Deps, task_id: str, when: str = "2026-03-07T09:00:00Z") -> None:
    """Leave a run ``running`` (its invocation died after the claim), holding its slots."""
    saved = deps.faults
    deps.faults = CrashPlan(frozenset({"after_claim"}), 1.0)
    with pytest.raises(SimulatedCrash):
        Executor(deps).process(QueueMessage(f"m-{task_id}-{when}", json.dumps(fire(task_id, when))), 120)
    deps.faults = saved


def deliver(deps: Deps, task_id: str, when: str) -> str:
    return Executor(deps).process(QueueMessage(f"m-{task_id}-{when}-x", json.dumps(fire(task_id, when))), 120)


def slot(deps: Deps, key: str) -> list[str]:
    item = deps.store.get_key(key)
    return sorted(item.get("holders", [])) if item else []


def events_of(deps: Deps, detail_type: str) -> list[dict]:  # type: ignore[type-arg]
    return [d for t, d in outbox_events(deps) if t == detail_type]


# --------------------------------------------------------------------------- overlap


def test_overlap_skip_skips_a_run_due_while_another_runs(deps: Deps) -> None:
    register(deps, task("job", overlap="skip"))
    start_and_crash(deps, "job")
    assert deliver(deps, "job", "2026-03-07T09:05:00Z") == "skipped-overlap"
    run = deps.store.get_run("job:20260307T090500Z")
    assert run is not None and run.state is RunState.SKIPPED and run.attempt == 0
    [record] = [r for r in deps.store.audit_trail(f"run#{run.run_id}") if r.action == "skipped"]
    assert record.evidence["holders"] == ["job:20260307T090000Z"]


def test_overlap_cancel_other_cancels_the_running_run_and_starts(deps: Deps) -> None:
    register(deps, task("job", overlap="cancel_other"))
    start_and_crash(deps, "job")
    assert deliver(deps, "job", "2026-03-07T09:05:00Z") == "succeeded"
    old = deps.store.get_run("job:20260307T090000Z")
    assert old is not None and old.state is RunState.CANCELLED
    assert old.attempts[-1].outcome is AttemptOutcome.CANCELLED and old.slots == []
    assert slot(deps, "slots#task#job") == []


def test_overlap_buffer_one_keeps_one_run_waiting_and_skips_the_next(deps: Deps, clock: ManualClock) -> None:
    register(deps, task("job", overlap="buffer_one"))
    start_and_crash(deps, "job")
    assert deliver(deps, "job", "2026-03-07T09:05:00Z") == "waiting"
    assert deliver(deps, "job", "2026-03-07T09:10:00Z") == "skipped-overlap"
    waiting = deps.store.get_run("job:20260307T090500Z")
    assert (
        waiting is not None
        and waiting.state is RunState.PENDING
        and waiting.attempt == 0
        and waiting.waits == 1
    )
    assert slot(deps, "slots#buffer#job") == ["job:20260307T090500Z"]
    # The running one's lease expires; the waiting one gets its turn when its message returns.
    clock.sleep(120)
    Sweeper(deps).sweep(scan_dlq=False, ledger=False)
    retry = [m for m in queue_messages(deps, "execution") if m["body"].get("run_id") == waiting.run_id]
    assert retry and retry[0]["body"]["attempt"] == 1
    result = Executor(deps).process(QueueMessage("again", retry[0]["raw"]), 120)
    assert result == "succeeded"
    assert slot(deps, "slots#buffer#job") == [] and slot(deps, "slots#task#job") == []


# --------------------------------------------------------------------------- mutex and quotas


def test_a_busy_mutex_group_makes_a_run_wait_without_spending_an_attempt(deps: Deps) -> None:
    register(deps, task("a", mutex_group="ledger-db"), task("b", mutex_group="ledger-db"))
    start_and_crash(deps, "a")
    assert deliver(deps, "b", "2026-03-07T09:00:00Z") == "waiting"
    run = deps.store.get_run("b:20260307T090000Z")
    assert run is not None and run.state is RunState.PENDING and run.attempt == 0 and run.waits == 1
    [warning] = events_of(deps, "task.execution.waiting")
    assert warning["reason"] == "mutex_busy" and warning["holders"] == ["a:20260307T090000Z"]
    [msg] = [m for m in queue_messages(deps, "execution") if m["body"].get("run_id") == run.run_id]
    assert msg["body"] == {"v": 1, "kind": "attempt", "run_id": run.run_id, "attempt": 1}
    assert deps.metrics.observations["task.lock.contention_rate"][-1] == 100.0


def test_a_tenant_over_its_quota_queues_runs(deps: Deps) -> None:
    deps.store.put_tenant("acme", TenantSettings(max_concurrent_runs=1), actor="test", at=deps.clock.now())
    register(deps, task("a"), task("b"))
    start_and_crash(deps, "a")
    assert deliver(deps, "b", "2026-03-07T09:00:00Z") == "waiting"
    [warning] = events_of(deps, "task.execution.waiting")
    assert warning["reason"] == "tenant_quota"


def test_slots_are_left_when_the_attempt_ends_and_when_its_lease_expires(
    deps: Deps, clock: ManualClock
) -> None:
    register(deps, task("a", mutex_group="g", overlap="skip"), task("b", mutex_group="g"))
    assert deliver(deps, "a", "2026-03-07T09:00:00Z") == "succeeded"
    assert slot(deps, "slots#mutex#g") == [] and slot(deps, "slots#task#a") == []
    start_and_crash(deps, "b")
    assert slot(deps, "slots#mutex#g") == ["b:20260307T090000Z"]
    clock.sleep(120)
    Sweeper(deps).sweep(scan_dlq=False, ledger=False)
    assert slot(deps, "slots#mutex#g") == []


# --------------------------------------------------------------------------- stagger


def test_stagger_delays_each_task_by_its_own_fixed_offset(deps: Deps) -> None:
    register(deps, task("job", schedule={"cron": "0 * * * *", "stagger": "60s"}))
    offset = task("job", schedule={"cron": "0 * * * *", "stagger": "60s"}).schedule.stagger_offset("job")  # type: ignore[union-attr]
    assert 0 < offset < 60
    assert deliver(deps, "job", "2026-03-07T09:00:00Z") == "staggered"
    [msg] = queue_messages(deps, "execution")
    assert msg["delayed_until_ms"] == pytest.approx((deps.clock.now().timestamp() + offset) * 1000, abs=1000)
    deps.clock.sleep(offset)  # type: ignore[attr-defined]
    assert deliver(deps, "job", "2026-03-07T09:00:00Z") == "succeeded"
    run = deps.store.get_run("job:20260307T090000Z")
    assert run is not None and run.due_at == datetime(2026, 3, 7, 9, tzinfo=UTC) + timedelta(seconds=offset)


def test_stagger_spreads_tasks_on_the_same_minute() -> None:
    spec = task("t", schedule={"cron": "0 * * * *", "stagger": "60s"}).schedule
    assert spec is not None
    offsets = {spec.stagger_offset(f"t{i}") for i in range(200)}
    assert len(offsets) > 150 and min(offsets) >= 0 and max(offsets) < 60


# --------------------------------------------------------------------------- SLA


def test_a_late_start_breaches_the_sla(deps: Deps, clock: ManualClock) -> None:
    register(deps, task("job", sla={"max_start_delay": "1m"}))
    clock.sleep(90)
    deliver(deps, "job", "2026-03-07T09:00:00Z")
    run = deps.store.get_run("job:20260307T090000Z")
    assert run is not None and run.sla_breaches == ["start_delay"]
    [breach] = events_of(deps, "task.sla.breached")
    assert breach["kind"] == "start_delay" and breach["observed_s"] == 90 and breach["limit_s"] == 60
    assert deps.metrics.counts["task.sla.breach_total"] == 1


def test_a_long_attempt_breaches_its_duration_sla_while_still_running(deps: Deps, clock: ManualClock) -> None:
    register(deps, task("job", timeout_s=200, sla={"max_duration": "30s"}))
    start_and_crash(deps, "job")
    clock.sleep(45)
    report = Sweeper(deps).sweep(scan_dlq=False, ledger=False)
    assert report.sla_breaches == ["job:20260307T090000Z"]
    assert Sweeper(deps).sweep(scan_dlq=False, ledger=False).sla_breaches == []  # recorded once


def test_three_breaching_runs_in_a_row_open_one_work_order(wired: Deps, clock: ManualClock) -> None:
    register(wired, task("job", sla={"max_start_delay": "30s"}))
    for minute in (0, 5, 10):
        clock.set(datetime(2026, 3, 7, 9, minute, 45, tzinfo=UTC))
        deliver(wired, "job", f"2026-03-07T09:{minute:02d}:00Z")
    breaches = events_of(wired, "task.sla.breached")
    assert len(breaches) == 3
    for detail in breaches:
        escalation.lambda_handler(sqs_event(bus_event("task.sla.breached", detail)), Context())
    orders = wired.store.work_orders()
    assert len(orders) == 1 and orders[0].subject.startswith("sla#job#")
    assert orders[0].reason == "sla_breached_3_times_in_a_row"
    escalation.lambda_handler(sqs_event(bus_event("task.sla.breached", breaches[-1])), Context())
    assert len(wired.store.work_orders()) == 1  # the same streak, the same work order


def test_a_run_within_its_sla_ends_the_streak(deps: Deps, clock: ManualClock) -> None:
    register(deps, task("job", sla={"max_start_delay": "30s"}))
    clock.set(datetime(2026, 3, 7, 9, 0, 45, tzinfo=UTC))
    deliver(deps, "job", "2026-03-07T09:00:00Z")
    clock.set(datetime(2026, 3, 7, 9, 5, 1, tzinfo=UTC))
    deliver(deps, "job", "2026-03-07T09:05:00Z")
    counter = deps.store.get_key(sla.counter_key("job"))
    assert counter is not None and counter["consecutive"] == 0 and counter["streak"] == 1


# --------------------------------------------------------------------------- pause and resume


def test_retries_of_a_paused_task_are_held_and_released_on_resume(deps: Deps, clock: ManualClock) -> None:
    register(deps, task("job", target={"type": "sim", "behavior": {"fail_first": 1}}))
    deliver(deps, "job", "2026-03-07T09:00:00Z")
    from rebound.engine.retries import RetryScheduler

    RetryScheduler(deps).on_failed("job:20260307T090000Z", 1)
    ops = TaskOps(deps, "test")
    ops.set_state("job", TaskState.PAUSED)
    clock.sleep(120)
    [msg] = [m for m in queue_messages(deps, "execution") if m["body"].get("kind") == "attempt"]
    assert Executor(deps).process(QueueMessage("r", msg["raw"]), 120) == "held"
    run = deps.store.get_run("job:20260307T090000Z")
    assert run is not None and run.state is RunState.RETRY_SCHEDULED and run.held_at is not None
    ops.set_state("job", TaskState.ACTIVE)
    report = ops.last_resume
    assert report is not None and report.delivered == ["job:20260307T090000Z"]
    [again] = [m for m in queue_messages(deps, "execution") if m["body"].get("kind") == "attempt"][-1:]
    assert Executor(deps).process(QueueMessage("r2", again["raw"]), 120) == "succeeded"


def test_resume_catches_up_on_the_fires_of_the_pause(deps: Deps, clock: ManualClock) -> None:
    register(deps, task("job", schedule={"cron": "*/10 * * * *"}, catch_up={"policy": "latest"}))
    ops = TaskOps(deps, "test")
    ops.set_state("job", TaskState.PAUSED)  # 09:00
    clock.sleep(45 * 60)  # 09:10, 09:20, 09:30 and 09:40 pass while paused
    ops.set_state("job", TaskState.ACTIVE)
    report = ops.last_resume
    assert report is not None and report.caught_up == ["job:20260307T094000Z"]
    assert sorted(report.skipped) == ["job:20260307T091000Z", "job:20260307T092000Z", "job:20260307T093000Z"]
    [msg] = [m for m in queue_messages(deps, "execution") if m["body"].get("catch_up")]
    assert msg["body"]["scheduled_time"] == "2026-03-07T09:40:00.000Z"


# --------------------------------------------------------------------------- the run ledger


def test_the_ledger_finds_a_missed_fire_and_catches_up(deps: Deps, clock: ManualClock) -> None:
    clock.set(datetime(2026, 3, 7, 8, 59, tzinfo=UTC))
    register(deps, task("job", schedule={"cron": "*/5 * * * *"}, catch_up={"policy": "all", "max_runs": 5}))
    Ledger(deps).reconcile()  # sets the watermark at 08:57
    clock.sleep(14 * 60)  # 09:13: the fires at 09:00, 09:05 and 09:10 never arrived
    deliver(deps, "job", "2026-03-07T09:05:00Z")  # ...except this one
    report = Ledger(deps).reconcile()
    assert sorted(report.missed) == ["job:20260307T090000Z", "job:20260307T091000Z"]
    assert sorted(report.caught_up) == sorted(report.missed)
    assert deps.metrics.counts["task.scheduler.missed_total"] == 2
    assert Ledger(deps).reconcile().missed == []  # accounted for once


def test_the_ledger_skip_policy_records_missed_fires_as_skipped_runs(deps: Deps, clock: ManualClock) -> None:
    clock.set(datetime(2026, 3, 7, 8, 59, tzinfo=UTC))
    register(deps, task("job", schedule={"cron": "*/5 * * * *"}, catch_up={"policy": "skip"}))
    Ledger(deps).reconcile()
    clock.sleep(9 * 60)
    report = Ledger(deps).reconcile()
    assert report.caught_up == [] and report.skipped == ["job:20260307T090000Z", "job:20260307T090500Z"]
    run = deps.store.get_run("job:20260307T090000Z")
    assert run is not None and run.state is RunState.SKIPPED


def test_the_ledger_delivers_the_repeated_hour_scheduler_runs_only_once(
    deps: Deps, clock: ManualClock
) -> None:
    # New York falls back on 2026-11-01: 01:30 EDT (05:30Z) and 01:30 EST (06:30Z).
    clock.set(datetime(2026, 11, 1, 5, 0, tzinfo=UTC))
    register(
        deps,
        task(
            "nightly",
            schedule={"cron": "30 1 * * *", "timezone": "America/New_York", "dst": {"repeated": "twice"}},
        ),
    )
    Ledger(deps).reconcile()
    clock.set(datetime(2026, 11, 1, 5, 30, tzinfo=UTC))
    deliver(deps, "nightly", "2026-11-01T05:30:00Z")  # Scheduler delivers the first 01:30 itself
    clock.set(datetime(2026, 11, 1, 6, 28, tzinfo=UTC))
    report = Ledger(deps).reconcile()  # sends the second 01:30 ahead, delayed to its instant
    assert report.delivered == ["nightly:20261101T063000Z"]
    [msg] = [m for m in queue_messages(deps, "execution") if m["body"].get("source") == "ledger"]
    assert msg["delayed_until_ms"] == datetime(2026, 11, 1, 6, 30, tzinfo=UTC).timestamp() * 1000
    assert Ledger(deps).reconcile().delivered == []  # once


def test_the_ledger_shifts_a_fire_out_of_the_spring_forward_gap(deps: Deps, clock: ManualClock) -> None:
    # New York springs forward on 2026-03-08: 02:30 does not exist; 'shift' runs it at 03:00 EDT (07:00Z).
    clock.set(datetime(2026, 3, 8, 6, 0, tzinfo=UTC))
    register(
        deps,
        task(
            "nightly",
            schedule={"cron": "30 2 * * *", "timezone": "America/New_York", "dst": {"missing": "shift"}},
        ),
    )
    Ledger(deps).reconcile()
    clock.set(datetime(2026, 3, 8, 6, 58, tzinfo=UTC))
    assert Ledger(deps).reconcile().delivered == ["nightly:20260308T070000Z"]


def test_a_jitter_window_becomes_the_schedules_flexible_time_window(deps: Deps) -> None:
    register(deps, task("job", schedule={"cron": "0 * * * *", "jitter_window": "5m"}))
    [name] = deps.store.get_task("job").schedule_names  # type: ignore[union-attr]
    schedule = deps.schedules.get(name)
    assert schedule is not None
    assert schedule["FlexibleTimeWindow"] == {"Mode": "FLEXIBLE", "MaximumWindowInMinutes": 5}


def test_tenant_settings_in_a_task_file_are_stored_and_enforced(deps: Deps, tmp_path: object) -> None:
    from pathlib import Path

    file = Path(str(tmp_path)) / "tasks.yaml"
    file.write_text(
        "tenants:\n  acme: {max_concurrent_runs: 1}\n"
        "tasks:\n"
        "  - {id: a, tenant: acme, schedule: {cron: '* * * * *'}, target: {type: sim}}\n"
        "  - {id: b, tenant: acme, schedule: {cron: '* * * * *'}, target: {type: sim}}\n"
    )
    ops = TaskOps(deps, "test")
    document = ops.load_document(file)
    ops.apply(ops.plan(document.tasks))
    assert ops.apply_tenants(document.tenants) == ["acme"]
    assert ops.apply_tenants(document.tenants) == []  # idempotent
    start_and_crash(deps, "a")
    assert deliver(deps, "b", "2026-03-07T09:00:00Z") == "waiting"
