"""Scheduling guarantees at the executor and the sweeper: overlap, mutual exclusion, tenant quotas,
stagger, SLA, pause and resume, and the run ledger."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from rebound.domain.run import AttemptOutcome, RunState
from rebound.domain.task import TaskState, TenantSettings
from rebound.domain.work_order import Resolution, WorkOrderState
from rebound.engine import sla
from rebound.engine.deps import Deps
from rebound.engine.dispatch import observe_queue
from rebound.engine.executor import Executor, QueueMessage
from rebound.engine.ledger import Ledger, LedgerReport
from rebound.engine.sweeper import Sweeper
from rebound.handlers import escalation
from rebound.handlers import executor as executor_handler
from rebound.ops.tasks import Change, TaskOps
from support import (
    Context,
    ManualClock,
    bus_event,
    crashed_message_returns,
    delete_done,
    fire,
    open_order_on,
    outbox_events,
    queue_messages,
    receive_event,
    register,
    sqs_event,
    start_and_crash,
    task,
    visible_at_ms,
)

pytestmark = pytest.mark.integration


def deliver(deps: Deps, task_id: str, when: str) -> str:
    return Executor(deps).process(QueueMessage(f"m-{task_id}-{when}-x", json.dumps(fire(task_id, when))), 120)


def reconcile(deps: Deps) -> LedgerReport:
    """The ledger as the sweeper runs it: after looking at the execution queue."""
    return Ledger(deps).reconcile(observe_queue(deps))


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


def test_overlap_cancel_other_resolves_the_cancelled_runs_open_work_order(deps: Deps) -> None:
    """A replayed run of a dead-lettered one still has its order open while it runs; when a newer
    fire cancels it, the order is resolved in that transaction, by the executor, with the reason."""
    register(deps, task("job", overlap="cancel_other"))
    start_and_crash(deps, "job")
    order_id = open_order_on(deps, "job:20260307T090000Z")
    assert deliver(deps, "job", "2026-03-07T09:05:00Z") == "succeeded"
    order = deps.store.get_work_order(order_id)
    assert order is not None and order.state is WorkOrderState.RESOLVED
    assert order.resolution is Resolution.CANCELLED and order.resolved_by == "executor"
    assert "cancelled by job:20260307T090500Z (overlap: cancel_other)" in (order.resolve_reason or "")
    assert [d["work_order_id"] for d in events_of(deps, "workorder.resolved")] == [order_id]


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
    # The running one's lease expires (its message comes back and fails it); the waiting one
    # gets its turn when its own message returns.
    clock.sleep(120)
    assert crashed_message_returns(deps, "job") == "lease-expired"
    Sweeper(deps).sweep(scan_dlq=False, ledger=False)
    retry = [m for m in queue_messages(deps, "execution") if m["body"].get("run_id") == waiting.run_id]
    assert retry and retry[0]["body"]["attempt"] == 1
    result = Executor(deps).process(QueueMessage("again", retry[0]["raw"]), 120)
    assert result == "succeeded"
    assert slot(deps, "slots#buffer#job") == [] and slot(deps, "slots#task#job") == []


# --------------------------------------------------------------------------- mutex and quotas


def test_a_busy_mutex_group_makes_a_run_wait_without_spending_an_attempt(
    deps: Deps, every_event: None
) -> None:
    register(deps, task("a", mutex_group="ledger-db"), task("b", mutex_group="ledger-db"))
    start_and_crash(deps, "a")
    assert deliver(deps, "b", "2026-03-07T09:00:00Z") == "waiting"
    run = deps.store.get_run("b:20260307T090000Z")
    assert run is not None and run.state is RunState.PENDING and run.attempt == 0 and run.waits == 1
    [warning] = events_of(deps, "task.execution.waiting")
    assert warning["reason"] == "mutex_busy" and warning["holders"] == ["a:20260307T090000Z"]
    [msg] = [m for m in queue_messages(deps, "execution") if m["body"].get("run_id") == run.run_id]
    assert msg["body"] == {"v": 1, "kind": "attempt", "run_id": run.run_id, "attempt": 1, "dispatch": 1}
    assert deps.metrics.observations["task.lock.contention_rate"][-1] == 100.0


def test_a_tenant_over_its_quota_queues_runs(deps: Deps, every_event: None) -> None:
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
    assert crashed_message_returns(deps, "b") == "lease-expired"
    assert slot(deps, "slots#mutex#g") == []


# --------------------------------------------------------------------------- stagger


def test_stagger_delays_each_task_by_its_own_fixed_offset(wired: Deps) -> None:
    """The staggered fire itself comes back at the task's offset: no copy is made, so a crash at
    any moment leaves exactly one message for the fire."""
    register(wired, task("job", schedule={"cron": "0 * * * *", "stagger": "60s"}))
    offset = task("job", schedule={"cron": "0 * * * *", "stagger": "60s"}).schedule.stagger_offset("job")  # type: ignore[union-attr]
    assert 0 < offset < 60
    wired.queues.send("execution", fire("job", "2026-03-07T09:00:00Z"))
    event = receive_event(wired)
    response = executor_handler.lambda_handler(event, Context())
    [record] = event["Records"]
    assert response == {"batchItemFailures": [{"itemIdentifier": record["messageId"]}]}
    [msg] = queue_messages(wired, "execution")
    assert msg["id"] == record["messageId"]
    expected = (wired.clock.now().timestamp() + offset) * 1000
    assert visible_at_ms(wired, "execution", msg["id"]) == pytest.approx(expected, abs=1000)
    assert wired.store.get_run("job:20260307T090000Z") is None
    wired.clock.sleep(offset + 1)  # type: ignore[attr-defined]
    again = receive_event(wired)
    assert [r["messageId"] for r in again["Records"]] == [record["messageId"]]
    delete_done(wired, again, executor_handler.lambda_handler(again, Context()))
    run = wired.store.get_run("job:20260307T090000Z")
    assert run is not None and run.state is RunState.SUCCEEDED
    assert run.due_at == datetime(2026, 3, 7, 9, tzinfo=UTC) + timedelta(seconds=offset)
    assert queue_messages(wired, "execution") == []


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
    from rebound.engine.retry_scheduler import RetryScheduler

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
    [msg] = queue_messages(deps, "execution")
    assert msg["body"]["run_id"] == "job:20260307T094000Z" and msg["body"]["attempt"] == 1
    caught_up = deps.store.get_run("job:20260307T094000Z")
    assert caught_up is not None and caught_up.catch_up and caught_up.state is RunState.PENDING


# --------------------------------------------------------------------------- the run ledger


def test_the_ledger_finds_a_missed_fire_and_catches_up(deps: Deps, clock: ManualClock) -> None:
    clock.set(datetime(2026, 3, 7, 8, 59, tzinfo=UTC))
    register(deps, task("job", schedule={"cron": "*/5 * * * *"}, catch_up={"policy": "all", "max_runs": 5}))
    reconcile(deps)  # sets the watermark at 08:57
    clock.sleep(14 * 60)  # 09:13: the fires at 09:00, 09:05 and 09:10 never arrived
    deliver(deps, "job", "2026-03-07T09:05:00Z")  # ...except this one
    report = reconcile(deps)
    assert sorted(report.missed) == ["job:20260307T090000Z", "job:20260307T091000Z"]
    assert sorted(report.caught_up) == sorted(report.missed)
    assert deps.metrics.counts["task.scheduler.missed_total"] == 2
    assert reconcile(deps).missed == []  # accounted for once


def test_a_run_an_eventually_consistent_read_has_not_seen_yet_is_not_a_missed_fire(
    deps: Deps, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ledger reads the fires' runs eventually consistent (half the price); the ones it did not
    find it reads again strongly consistent, so a run written a moment before is never missed,
    and when every run is found there is no second read."""
    clock.set(datetime(2026, 3, 7, 8, 59, tzinfo=UTC))
    register(deps, task("job", schedule={"cron": "*/5 * * * *"}, catch_up={"policy": "all", "max_runs": 5}))
    reconcile(deps)  # sets the watermark at 08:57
    clock.sleep(9 * 60)  # 09:08
    deliver(deps, "job", "2026-03-07T09:00:00Z")
    deliver(deps, "job", "2026-03-07T09:05:00Z")
    real = deps.store.existing_runs
    reads: list[tuple[list[str], bool]] = []
    lagging = {"job:20260307T090500Z"}  # written, not yet replicated to every read

    def existing_runs(run_ids: list[str], *, consistent: bool = True) -> set[str]:
        reads.append((list(run_ids), consistent))
        found = real(run_ids, consistent=consistent)
        return found if consistent else found - lagging

    monkeypatch.setattr(deps.store, "existing_runs", existing_runs)
    report = reconcile(deps)
    assert report.missed == [] and report.caught_up == []
    assert reads == [
        (["job:20260307T090000Z", "job:20260307T090500Z"], False),
        (["job:20260307T090500Z"], True),
    ]
    reads.clear()
    lagging.clear()
    clock.sleep(5 * 60)  # 09:13: the 09:10 fire arrived and the first read sees it
    deliver(deps, "job", "2026-03-07T09:10:00Z")
    assert reconcile(deps).missed == []
    assert reads == [(["job:20260307T091000Z"], False)]
    assert "task.scheduler.missed_total" not in deps.metrics.counts


def test_the_ledger_skip_policy_records_missed_fires_as_skipped_runs(deps: Deps, clock: ManualClock) -> None:
    clock.set(datetime(2026, 3, 7, 8, 59, tzinfo=UTC))
    register(deps, task("job", schedule={"cron": "*/5 * * * *"}, catch_up={"policy": "skip"}))
    reconcile(deps)
    clock.sleep(9 * 60)
    report = reconcile(deps)
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
    reconcile(deps)
    clock.set(datetime(2026, 11, 1, 5, 30, tzinfo=UTC))
    deliver(deps, "nightly", "2026-11-01T05:30:00Z")  # Scheduler delivers the first 01:30 itself
    clock.set(datetime(2026, 11, 1, 6, 28, tzinfo=UTC))
    report = reconcile(deps)  # sends the second 01:30 ahead, delayed to its instant
    assert report.delivered == ["nightly:20261101T063000Z"]
    [msg] = [
        m for m in queue_messages(deps, "execution") if m["body"].get("run_id") == "nightly:20261101T063000Z"
    ]
    assert msg["delayed_until_ms"] == datetime(2026, 11, 1, 6, 30, tzinfo=UTC).timestamp() * 1000
    assert reconcile(deps).delivered == []  # once


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
    reconcile(deps)
    clock.set(datetime(2026, 3, 8, 6, 58, tzinfo=UTC))
    assert reconcile(deps).delivered == ["nightly:20260308T070000Z"]


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
    start_and_crash(deps, "acme.a")  # a file's ids are qualified with their tenant
    assert deliver(deps, "acme.b", "2026-03-07T09:00:00Z") == "waiting"


# --------------------------------------------------------------------------- jitter and the ledger


def test_a_jittered_fire_delivered_late_in_its_window_is_not_missed(deps: Deps, clock: ManualClock) -> None:
    clock.set(datetime(2026, 3, 7, 8, 59, tzinfo=UTC))
    register(
        deps,
        task("spread", schedule={"cron": "0 * * * *", "jitter_window": "10m"}, catch_up={"policy": "skip"}),
    )
    reconcile(deps)
    clock.set(datetime(2026, 3, 7, 9, 3, tzinfo=UTC))
    assert reconcile(deps).missed == []  # 09:00 is still inside its window
    clock.set(datetime(2026, 3, 7, 9, 7, tzinfo=UTC))
    assert deliver(deps, "spread", "2026-03-07T09:00:00Z") == "succeeded"  # Scheduler's moment
    clock.set(datetime(2026, 3, 7, 9, 20, tzinfo=UTC))
    assert reconcile(deps).missed == []
    assert deps.metrics.counts.get("task.scheduler.missed_total", 0) == 0
    on_time = deps.metrics.observations["task.scheduler.on_time_rate"]
    assert on_time == [100.0]  # 7 minutes into a 10-minute window is on time


def test_a_jittered_fire_that_never_comes_is_missed_once_its_window_has_passed(
    deps: Deps, clock: ManualClock
) -> None:
    clock.set(datetime(2026, 3, 7, 8, 59, tzinfo=UTC))
    register(
        deps,
        task("spread", schedule={"cron": "0 * * * *", "jitter_window": "10m"}, catch_up={"policy": "skip"}),
    )
    reconcile(deps)
    clock.set(datetime(2026, 3, 7, 9, 11, tzinfo=UTC))
    assert reconcile(deps).missed == []  # window (10 min) + grace (2 min) not yet over
    clock.set(datetime(2026, 3, 7, 9, 13, tzinfo=UTC))
    report = reconcile(deps)
    assert report.missed == report.skipped == ["spread:20260307T090000Z"]
    assert reconcile(deps).missed == []  # counted once


def test_the_sla_start_delay_of_a_jittered_task_counts_from_the_end_of_its_window(
    deps: Deps, clock: ManualClock
) -> None:
    schedule = {"cron": "0 * * * *", "jitter_window": "5m"}
    register(deps, task("spread", schedule=schedule, sla={"max_start_delay": "1m"}))
    clock.set(datetime(2026, 3, 7, 9, 5, 30, tzinfo=UTC))  # 30 s after the window closed: within the SLA
    deliver(deps, "spread", "2026-03-07T09:00:00Z")
    clock.set(datetime(2026, 3, 7, 10, 7, tzinfo=UTC))  # 2 minutes after the window: a breach
    deliver(deps, "spread", "2026-03-07T10:00:00Z")
    [breach] = events_of(deps, "task.sla.breached")
    assert breach["run_id"] == "spread:20260307T100000Z" and breach["observed_s"] == 120
    assert deps.metrics.observations["task.scheduler.on_time_rate"] == [100.0, 0.0]


# --------------------------------------------------------------------------- more overlap and catch-up


def test_overlap_allow_all_starts_a_run_while_another_runs(deps: Deps) -> None:
    register(deps, task("job", overlap="allow_all"))
    start_and_crash(deps, "job")
    assert deliver(deps, "job", "2026-03-07T09:05:00Z") == "succeeded"
    first = deps.store.get_run("job:20260307T090000Z")
    assert first is not None and first.state is RunState.RUNNING  # untouched, still running
    assert slot(deps, "slots#task#job") == []  # allow_all takes no task slot


def test_catch_up_all_runs_at_most_max_runs_and_only_inside_its_window(
    deps: Deps, clock: ManualClock
) -> None:
    clock.set(datetime(2026, 3, 7, 8, 59, tzinfo=UTC))
    every_five = {"cron": "*/5 * * * *"}
    register(
        deps,
        task("capped", schedule=every_five, catch_up={"policy": "all", "max_runs": 2, "window": "1h"}),
        task("windowed", schedule=every_five, catch_up={"policy": "all", "max_runs": 10, "window": "12m"}),
    )
    reconcile(deps)
    clock.set(datetime(2026, 3, 7, 9, 23, tzinfo=UTC))  # 09:00 .. 09:20 never arrived: five fires each
    report = reconcile(deps)
    assert len(report.missed) == 10

    def of(task_id: str, ids: list[str]) -> list[str]:
        return sorted(i.split(":")[1] for i in ids if i.startswith(f"{task_id}:"))

    # capped: all five are inside its hour; max_runs keeps the latest two.
    assert of("capped", report.caught_up) == ["20260307T091500Z", "20260307T092000Z"]
    assert of("capped", report.skipped) == ["20260307T090000Z", "20260307T090500Z", "20260307T091000Z"]
    # windowed: the cap is ten, but only 09:15 and 09:20 are inside 12 minutes (09:10 is 13 old).
    assert of("windowed", report.caught_up) == ["20260307T091500Z", "20260307T092000Z"]
    assert of("windowed", report.skipped) == ["20260307T090000Z", "20260307T090500Z", "20260307T091000Z"]


# --------------------------------------------------------------------------- SLA notification


def test_an_sla_breach_is_notified_on_the_alerts_topic(wired: Deps, clock: ManualClock) -> None:
    sqs = wired.queues.client
    inbox = sqs.create_queue(QueueName="sla-inbox")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=inbox, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    assert wired.settings.topic_arn
    wired.notifier.channels[0].client.subscribe(  # type: ignore[attr-defined]
        TopicArn=wired.settings.topic_arn,
        Protocol="sqs",
        Endpoint=arn,
        Attributes={"RawMessageDelivery": "true"},
    )
    register(wired, task("job", sla={"max_start_delay": "30s"}))
    clock.set(datetime(2026, 3, 7, 9, 0, 45, tzinfo=UTC))
    deliver(wired, "job", "2026-03-07T09:00:00Z")
    [breach] = events_of(wired, "task.sla.breached")
    escalation.lambda_handler(sqs_event(bus_event("task.sla.breached", breach)), Context())
    [message] = sqs.receive_message(QueueUrl=inbox, MessageAttributeNames=["All"])["Messages"]
    body = json.loads(message["Body"])
    assert body["task_id"] == "job" and body["kind"] == "start_delay"
    assert body["next_step"] == "rebound runs show job:20260307T090000Z"
    assert message["MessageAttributes"]["severity"]["StringValue"] == "warning"
    assert wired.store.work_orders() == []  # one breach notifies; only three in a row open a work order


# --------------------------------------------------------------------------- schedule forms


def test_an_aws_expression_is_deployed_verbatim_in_the_tasks_time_zone(deps: Deps) -> None:
    register(deps, task("weekdays", schedule={"aws": "cron(0 9 ? * MON-FRI *)", "timezone": "Europe/London"}))
    [name] = deps.store.get_task("weekdays").schedule_names  # type: ignore[union-attr]
    schedule = deps.schedules.get(name)
    assert schedule is not None
    assert schedule["ScheduleExpression"] == "cron(0 9 ? * MON-FRI *)"
    assert schedule["ScheduleExpressionTimezone"] == "Europe/London"


@pytest.mark.parametrize(
    ("schedule", "problem"),
    [
        ({"aws": "cron(0 9 * * MON-FRI *)"}, "?"),  # AWS needs ? in day-of-month or day-of-week
        ({"aws": "every tuesday"}, "every tuesday"),
        ({"aws": "cron(0 9 ? * MON-FRI *)", "dst": {"repeated": "twice"}}, "dst applies to Unix cron"),
    ],
)
def test_a_bad_aws_schedule_is_refused_with_the_reason(schedule: dict[str, object], problem: str) -> None:
    with pytest.raises(ValueError) as refused:
        task("bad", schedule=schedule)
    assert "schedule" in str(refused.value) and problem in str(refused.value)


def test_a_unix_day_of_month_or_day_of_week_task_deploys_two_schedules_that_together_fire_as_cron(
    deps: Deps,
) -> None:
    # Unix: the 1st of the month OR any Monday. AWS needs ? in one of the two fields, so two schedules.
    register(deps, task("either", schedule={"cron": "0 9 1 * 1", "timezone": "UTC"}))
    names = deps.store.get_task("either").schedule_names  # type: ignore[union-attr]
    assert len(names) == 2
    expressions = sorted(deps.schedules.get(n)["ScheduleExpression"] for n in names)  # type: ignore[index]
    assert expressions == ["cron(0 9 1 * ? *)", "cron(0 9 ? * MON *)"]


def test_a_task_whose_cron_now_translates_to_fewer_schedules_loses_the_old_one_on_apply(
    deps: Deps, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Stored by a Rebound that deployed February 31 as a schedule of its own, beside the Sundays.
    from rebound.domain import schedules

    monkeypatch.setattr(
        schedules.cron, "unix_to_aws", lambda expr: ["cron(0 0 31 2 ? *)", "cron(0 0 ? 2 SUN *)"]
    )
    job = task("feb", schedule={"cron": "0 0 31 2 0", "timezone": "UTC"})
    register(deps, job)
    old = deps.store.get_task("feb").schedule_names  # type: ignore[union-attr]
    assert len(old) == 2
    monkeypatch.undo()

    ops = TaskOps(deps, actor="test")
    [change] = ops.plan([job])
    assert change.change is Change.UPDATE
    assert change.diff == {"schedules": (list(old), [old[0]])}
    ops.apply([change])

    stored = deps.store.get_task("feb")
    assert stored is not None and stored.schedule_names == (old[0],)
    assert deps.schedules.get(old[0])["ScheduleExpression"] == "cron(0 0 ? 2 SUN *)"  # type: ignore[index]
    assert deps.schedules.get(old[1]) is None
    [again] = ops.plan([job])
    assert again.change is Change.UNCHANGED
