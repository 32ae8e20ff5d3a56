"""The whole retry loop through the local runtime, under the virtual clock, over HTTP to moto."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from rebound.config.loader import load_task_file
from rebound.domain.audit import rebuild_run, trail_mismatches, verify_chain
from rebound.domain.run import Run, RunState
from rebound.domain.tenancy import short_id
from rebound.domain.work_order import WorkOrderState
from rebound.engine.health.report import Thresholds
from rebound.resources import EXECUTION_VISIBILITY_S
from rebound_local.clock import VirtualClock
from rebound_local.cloud import reset_moto
from rebound_local.stack import Faults, LocalStack, start_local
from support import queue_messages, register, task

pytestmark = pytest.mark.e2e
START = datetime(2026, 3, 7, 8, 59, tzinfo=UTC)
DEMO_TASKS = Path(__file__).resolve().parents[2] / "config" / "demo" / "tasks.yaml"


@pytest.fixture
def make_stack() -> Iterator:  # type: ignore[type-arg]
    stacks: list[LocalStack] = []

    def make(faults: Faults | None = None, transport: str = "direct") -> LocalStack:
        reset_moto()
        stack = start_local(VirtualClock(START), faults=faults, transport=transport)
        stacks.append(stack)
        return stack

    yield make
    for stack in stacks:
        stack.stop()
    reset_moto()


def runs_of(stack: LocalStack) -> dict[str, list[Run]]:
    out: dict[str, list[Run]] = {}
    for run in stack.deps.store.scan_runs():
        out.setdefault(short_id(run.task_id), []).append(run)  # the file's ids, not <tenant>.<id>
    return out


def waits(run: Run) -> list[float]:
    return [
        (nxt.started_at - prev.ended_at).total_seconds()
        for prev, nxt in zip(run.attempts, run.attempts[1:], strict=False)
        if prev.ended_at
    ]


def test_demo_scenario(make_stack) -> None:  # type: ignore[no-untyped-def]
    stack = make_stack(transport="http")  # the handlers on the real wire, as `make demo` runs them
    deps = stack.deps
    register(deps, *load_task_file(DEMO_TASKS))
    sqs = stack.cloud.client("sqs")
    sqs.send_message(QueueUrl=stack.settings.queue("execution").url, MessageBody="{not json")
    sqs.send_message(
        QueueUrl=stack.settings.queue("execution").url,
        MessageBody='{"v": 1, "kind": "fire", "task_id": "nobody", "scheduled_time": "2026-03-07T09:00:00Z"}',
    )
    stack.runtime.run_virtual(START + timedelta(minutes=36))
    runs = runs_of(stack)
    policy = deps.policies.effective("default")

    # The healthy task succeeds on attempt 1, every time it fires.
    assert len(runs["heartbeat"]) == 4
    assert all(r.state is RunState.SUCCEEDED and r.attempt == 1 for r in runs["heartbeat"])

    # The flaky task succeeds on attempt 3 after waiting base_delay, then base_delay x multiplier.
    [flaky] = runs["sync-invoices"]
    assert flaky.state is RunState.SUCCEEDED and flaky.attempt == 3
    assert waits(flaky) == [policy.base_delay, policy.base_delay * policy.multiplier]

    # The failing task is dead-lettered after max_attempts, with one work order and a whole trail.
    [dead] = runs["export-ledger"]
    assert dead.state is RunState.DEAD_LETTERED and dead.attempt == policy.max_attempts
    orders = [o for o in deps.store.work_orders() if o.run_id == dead.run_id]
    assert len(orders) == 1 and dead.work_order_id == orders[0].work_order_id
    trail = deps.store.audit_trail(f"run#{dead.run_id}")
    assert verify_chain(dead.run_id, trail).ok
    stored = deps.store.get_run(dead.run_id)
    assert stored is not None and trail_mismatches(stored, trail) == []
    assert rebuild_run(dead.run_id, trail) == stored.model_copy(update={"rev": 0})
    assert [r.action for r in trail] == [
        "attempt-started",
        "attempt-failed",
        "retry-scheduled",
        "attempt-started",
        "attempt-failed",
        "retry-scheduled",
        "attempt-started",
        "attempt-failed",
        "dead-lettered",
        "dlq-message-sent",
        "work-order-opened",
    ]

    # Bad input: the malformed message is in the DLQ with its reason and has a work order;
    # the message for an unknown task is a terminal failure, escalated like any other.
    [ghost] = runs["nobody"]
    assert ghost.state is RunState.DEAD_LETTERED and ghost.last_error_code == "UNKNOWN_TASK"
    orders = deps.store.work_orders()
    run_orders = [o for o in orders if not o.subject.startswith("health#")]
    assert sorted(o.subject.split("#")[0] for o in run_orders) == ["msg", "run", "run"]
    # Nobody acknowledges them, so the retry-health report the sweeper runs every five minutes
    # finds the oldest past its severity's acknowledgement SLA and keeps one work order for it,
    # opened by the first report after the SLA ran out; nothing else in the demo is unhealthy.
    [health] = [o for o in orders if o.subject.startswith("health#")]
    assert health.subject == "health#acknowledgement_gaps" and health.state is WorkOrderState.OPEN
    oldest = min(run_orders, key=lambda o: o.opened_at)
    sla_out = oldest.opened_at + Thresholds().ack_sla[oldest.severity]
    assert sla_out < health.opened_at <= sla_out + timedelta(minutes=5)
    reasons = sorted(m["attributes"]["reason"].split(":")[0] for m in queue_messages(deps, "dlq"))
    assert reasons == ["attempts_exhausted", "not_json", "terminal_error"]


def test_a_duplicate_delivery_storm_never_runs_a_target_twice(make_stack) -> None:  # type: ignore[no-untyped-def]
    stack = make_stack(Faults(duplicate_delivery=3))
    register(
        stack.deps,
        task("steady", schedule={"cron": "* * * * *"}),
        task(
            "flaky",
            schedule={"cron": "*/2 * * * *"},
            target={"type": "sim", "behavior": {"fail_first": 1}},
            retry_policy={"extends": "default", "base_delay": "30s"},
        ),
        task(
            "broken",
            schedule={"cron": "*/5 * * * *"},
            target={"type": "sim", "behavior": {"always_fail": True}},
            retry_policy={"extends": "default", "base_delay": "20s", "max_attempts": 2},
        ),
    )
    stack.runtime.run_virtual(START + timedelta(minutes=30))
    calls = Counter((c.run_id, c.attempt) for c in stack.targets.calls)
    assert calls and max(calls.values()) == 1
    assert stack.runtime.stats.messages_delivered["executor"] > 0
    states = Counter(r.state for r in stack.deps.store.scan_runs())
    assert set(states) <= {RunState.SUCCEEDED, RunState.DEAD_LETTERED, RunState.RETRY_SCHEDULED}
    broken = [
        r for r in stack.deps.store.scan_runs() if r.task_id == "broken" and r.state is RunState.DEAD_LETTERED
    ]
    orders = Counter(o.run_id for o in stack.deps.store.work_orders())
    assert broken and all(orders[r.run_id] == 1 for r in broken)


@pytest.mark.parametrize("point", ["after_claim", "after_target"])
def test_runs_survive_an_executor_that_crashes(make_stack, point: str) -> None:  # type: ignore[no-untyped-def]
    stack = make_stack(Faults(crash_points=frozenset({point}), crash_rate=0.4, seed=11))
    tasks = [task(f"job{i}", schedule={"cron": "0,10,20,30 9 * * *"}, timeout_s=20) for i in range(4)]
    register(stack.deps, *tasks)
    # A crash returns the rest of its batch after the visibility timeout (30 min), and a message
    # may meet crashes several times in a row: let the execution queue settle (within six hours).
    until = START + timedelta(minutes=31)
    while until < START + timedelta(hours=6):
        stack.runtime.run_virtual(until)
        if until > START + timedelta(minutes=31) and stack.deps.queues.counts("execution").total == 0:
            break
        until += timedelta(seconds=EXECUTION_VISIBILITY_S)
    assert stack.crashes.crashes[point] > 0
    runs = list(stack.deps.store.scan_runs())
    # Every fire became a run, or (crashed before its run was claimed, receive after receive, until
    # SQS moved it) is a fire message in the DLQ for an operator: none is lost.
    fires_in_dlq = [
        m
        for m in queue_messages(stack.deps, "dlq")
        if isinstance(m["body"], dict) and m["body"].get("kind") == "fire"
    ]
    assert len(runs) + len(fires_in_dlq) == 4 * 4
    assert {r.state for r in runs} <= {RunState.SUCCEEDED, RunState.DEAD_LETTERED}
    calls = Counter((c.run_id, c.attempt) for c in stack.targets.calls)
    assert max(calls.values()) == 1
    timed_out = [a for r in runs for a in r.attempts if a.error_code == "TIMEOUT"]
    assert timed_out, "a crashed attempt is failed by its lease, not left running"


def test_a_twenty_minute_delay_goes_through_a_one_time_schedule(make_stack) -> None:  # type: ignore[no-untyped-def]
    stack = make_stack()
    register(
        stack.deps,
        task(
            "slow",
            schedule={"cron": "0 9 * * *"},
            target={"type": "sim", "behavior": {"fail_first": 1}},
            retry_policy={"extends": "default", "base_delay": "20m", "max_delay": "1h"},
        ),
    )
    stack.runtime.run_virtual(START + timedelta(minutes=10))
    [run] = stack.deps.store.scan_runs()
    assert run.state is RunState.RETRY_SCHEDULED
    retry = stack.deps.schedules.get(run.dispatch_reference or "")
    assert retry is not None and retry["ScheduleExpression"] == "at(2026-03-07T09:20:00)"
    stack.runtime.run_virtual(START + timedelta(minutes=25))
    [run] = stack.deps.store.scan_runs()
    assert run.state is RunState.SUCCEEDED and run.attempt == 2
    assert run.attempts[1].started_at == datetime(2026, 3, 7, 9, 20, tzinfo=UTC)
    assert stack.deps.schedules.get(run.dispatch_reference or "") is None  # ActionAfterCompletion=DELETE


def test_an_event_triggered_task_runs_and_retries_on_the_local_runtime(make_stack) -> None:  # type: ignore[no-untyped-def]
    """An outside client puts an event on the bus; the task's rule turns it into a run, which
    fails once, is retried after base_delay and succeeds; an event the pattern does not match
    starts nothing."""
    stack = make_stack()
    pattern = {"source": ["shop"], "detail-type": ["order.placed"]}
    register(
        stack.deps,
        task("on-order", schedule=None, event=pattern, target={"type": "sim", "behavior": {"fail_first": 1}}),
    )
    events = stack.cloud.client("events")
    entry = {
        "Source": "shop",
        "DetailType": "order.placed",
        "Detail": '{"order": "o-1"}',
        "EventBusName": stack.settings.bus_name,
    }
    assert (
        events.put_events(Entries=[entry, {**entry, "DetailType": "order.cancelled"}])["FailedEntryCount"]
        == 0
    )
    stack.runtime.run_virtual(START + timedelta(minutes=6))
    [run] = runs_of(stack)["on-order"]
    assert run.trigger.value == "event" and run.event_detail == {"order": "o-1"}
    assert run.state is RunState.SUCCEEDED and run.attempt == 2
    assert waits(run) == [stack.deps.policies.effective("default").base_delay]
