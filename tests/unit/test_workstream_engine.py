"""Workstreams on the engine's real paths (in-memory ports): steps are task runs through the
executor, the retry scheduler and dead-lettering; their ends come back through the outbox."""

from __future__ import annotations

from typing import Any

import pytest
from fakes import MemoryWorld, memory_deps

from rebound.domain.audit import verify_chain
from rebound.domain.basics import Severity
from rebound.domain.run import RunState
from rebound.domain.work_order import Resolution, WorkOrderState
from rebound.domain.workstream_recovery import rollback as rollback_to
from rebound.domain.workstream_runs import StepState, WorkstreamState
from rebound.domain.workstreams import ResourceSpec
from rebound.engine.workstreams import Workstreams, resource_slot, workstream_subject
from support import ledger_tasks, nightly_ledger, open_order_on, register, task

pytestmark = pytest.mark.unit


@pytest.fixture
def world() -> MemoryWorld:
    return memory_deps()


def ledger(world: MemoryWorld, transform: dict[str, Any] | None = None, max_holders: int = 1) -> Workstreams:
    ledger_tasks(world.deps, transform)
    engine = Workstreams(world.deps, actor="test")
    engine.register(
        [nightly_ledger()],
        [ResourceSpec(id="warehouse-write", max_holders=max_holders)],
    )
    return engine


def relay_all(world: MemoryWorld) -> None:
    """Relay the outbox until no consumer writes another event."""
    while len(world.store.events) > world.relayed:
        world.relay()


def step(world: MemoryWorld) -> bool:
    """Deliver the next due messages and relay what they wrote; False when nothing is left."""
    relay_all(world)
    pending = world.queues.messages["execution"]
    if not pending:
        return False
    world.clock.set(max(world.clock.now(), min(m.visible_at for m in pending)))
    world.deliver()
    relay_all(world)
    return True


def drive(world: MemoryWorld, rounds: int = 60) -> None:
    """Deliver every message as it comes due and relay the outbox, until nothing is left."""
    for _ in range(rounds):
        if not step(world):
            return
    raise AssertionError("the workstream did not settle")


def test_a_workstream_runs_its_steps_in_order_through_the_retry_loop(world: MemoryWorld) -> None:
    engine = ledger(world, transform={"fail_first": 1})
    run = engine.start("nightly-ledger", token="t1")
    assert [s.step for s in run.steps if s.state is StepState.RUNNING] == ["extract"]
    extract_run = world.store.get_run(run.step("extract").run_id or "")
    assert extract_run is not None and extract_run.workstream_run == run.run_id
    drive(world)
    done = engine.get_run(run.run_id)
    assert done.state is WorkstreamState.COMPLETED
    assert {s.step: s.state for s in done.steps} == dict.fromkeys(
        ["extract", "transform", "load", "report"], StepState.SUCCEEDED
    )
    transform = world.store.get_run(done.step("transform").run_id or "")
    assert transform is not None and transform.attempt == 2, "the failed attempt was retried"
    order = [world.store.get_run(s.run_id or "").attempts[0].started_at for s in done.steps]  # type: ignore[union-attr]
    assert order == sorted(order)
    trail = world.store.audit_trail(workstream_subject(run.run_id))
    assert verify_chain(workstream_subject(run.run_id), trail).ok
    assert (done.audit_seq, done.audit_head) == (trail[-1].seq, trail[-1].hash)
    cps = engine.checkpoints(run.run_id)
    assert [c.version for c in cps] == list(range(1, done.checkpoint_version + 1))
    assert cps[-1].completed == ["extract", "transform", "load", "report"]
    assert engine.resource_holders("warehouse-write") == []


def test_a_dead_lettered_step_fails_the_workstream_and_opens_one_critical_work_order(
    world: MemoryWorld,
) -> None:
    engine = ledger(world, transform={"terminal_error": "BAD_INPUT"})
    run = engine.start("nightly-ledger", token="t1")
    drive(world)
    failed = engine.get_run(run.run_id)
    assert failed.state is WorkstreamState.FAILED
    assert failed.step("transform").state is StepState.FAILED
    assert failed.step("load").state is StepState.BLOCKED and failed.step("report").state is StepState.BLOCKED
    orders = [o for o in world.store.work_orders() if o.subject == workstream_subject(run.run_id) + "#failed"]
    assert len(orders) == 1 and orders[0].severity is Severity.CRITICAL
    opened = world.store.audit_trail(f"workorder#{orders[0].work_order_id}")[0].evidence
    assert opened["failed_steps"] == ["transform"] and opened["critical_failed"] is True
    assert opened["failed_scope"] == "some"
    # the step's run has its own work order, as any dead letter does
    assert any(o.run_id == failed.step("transform").run_id for o in world.store.work_orders())
    world.relay()  # a redelivered workstream.failed opens nothing more
    assert (
        len([o for o in world.store.work_orders() if o.subject == workstream_subject(run.run_id) + "#failed"])
        == 1
    )


def test_skipping_the_failed_step_lets_the_workstream_complete(world: MemoryWorld) -> None:
    engine = ledger(world, transform={"terminal_error": "BAD_INPUT"})
    run = engine.start("nightly-ledger", token="t1")
    drive(world)
    from rebound.domain.workstream_recovery import skip_step

    engine.change(
        run.run_id,
        lambda r, books, at: skip_step(r, "transform", "fixed by hand", books, at),
        action="step-skipped",
        evidence={"step": "transform", "reason": "fixed by hand"},
    )
    drive(world)
    done = engine.get_run(run.run_id)
    assert done.state is WorkstreamState.COMPLETED
    assert done.step("transform").warning == "skipped by an operator: fixed by hand"


def test_rollback_cancels_the_running_step_and_releases_its_resource(world: MemoryWorld) -> None:
    engine = ledger(world)
    run = engine.start("nightly-ledger", token="t1")
    while engine.get_run(run.run_id).step("load").state is not StepState.RUNNING:
        assert step(world)
    running = engine.get_run(run.run_id)
    assert running.step("load").state is StepState.RUNNING
    assert world.store.get_key(resource_slot("warehouse-write"))["holders"] == [f"{run.run_id}/load"]  # type: ignore[index]
    first = engine.checkpoints(run.run_id)[0]
    load_run = running.step("load").run_id or ""
    after, progress = engine.change(
        run.run_id,
        lambda r, books, at: rollback_to(r, first, books, at),
        action="rolled-back",
        evidence={"to": first.version},
    )
    assert progress.cancel == [load_run]
    assert world.store.get_run(load_run).state is RunState.CANCELLED  # type: ignore[union-attr]
    assert engine.resource_holders("warehouse-write") == []
    assert after.state is WorkstreamState.ROLLED_BACK
    assert set(progress.not_rolled_back) == {"extract", "transform"}
    drive(world)  # the cancelled run's end is heard and ignored; nothing starts while rolled back
    assert engine.get_run(run.run_id).state is WorkstreamState.ROLLED_BACK


def test_a_rollback_resolves_the_open_work_order_of_the_step_run_it_cancels(world: MemoryWorld) -> None:
    engine = ledger(world)
    run = engine.start("nightly-ledger", token="t1")
    while engine.get_run(run.run_id).step("load").state is not StepState.RUNNING:
        assert step(world)
    load_run = engine.get_run(run.run_id).step("load").run_id or ""
    order_id = open_order_on(world.deps, load_run)
    first = engine.checkpoints(run.run_id)[0]
    engine.change(
        run.run_id,
        lambda r, books, at: rollback_to(r, first, books, at),
        action="rolled-back",
        evidence={"to": first.version},
    )
    order = world.store.get_work_order(order_id)
    assert order is not None and order.state is WorkOrderState.RESOLVED
    assert order.resolution is Resolution.CANCELLED and order.resolved_by == "test"
    assert f"workstream {run.run_id}: rolled back or step cancelled" in (order.resolve_reason or "")
    resolved = [r for r in world.store.audit_trail(f"workorder#{order_id}") if r.action == "resolved"]
    assert len(resolved) == 1 and resolved[0].actor == "test"


def test_a_resource_never_has_more_holders_than_its_limit_across_runs(world: MemoryWorld) -> None:
    engine = ledger(world, max_holders=1)
    first = engine.start("nightly-ledger", token="a")
    second = engine.start("nightly-ledger", token="b")
    seen = set()
    for _ in range(40):
        engine.poll_waiting()  # what the sweeper does every minute
        seen.add(tuple(sorted(engine.get_run(r.run_id).step("load").state.value for r in (first, second))))
        slot = world.store.get_key(resource_slot("warehouse-write")) or {}
        assert len(slot.get("holders", [])) <= 1
        if not step(world) and all(
            engine.get_run(r.run_id).state is WorkstreamState.COMPLETED for r in (first, second)
        ):
            break
    assert ("running", "waiting") in seen, "one load waited while the other held the warehouse"
    assert {engine.get_run(r.run_id).state for r in (first, second)} == {WorkstreamState.COMPLETED}


def test_a_step_end_for_an_unknown_workstream_run_is_dropped_not_retried(world: MemoryWorld) -> None:
    engine = ledger(world)
    detail = {"workstream_run_id": "gone", "run_id": "extract:x", "state": "succeeded"}
    assert engine.on_step_ended(detail) == "unknown workstream run"


def test_steps_entering_or_leaving_one_resource_together_write_it_once_and_a_freed_place_is_taken(
    world: MemoryWorld,
) -> None:
    """A transaction may write an item once (the memory store refuses more, as DynamoDB does):
    two steps that start together enter the resource's slot in one write; a step that ends
    while a third waits for its place leaves in one commit, and the third starts right after."""
    from rebound.domain.workstreams import Workstream, WorkstreamStep

    register(world.deps, task("prep"), *(task(f"part-{n}") for n in "abc"))
    engine = Workstreams(world.deps, actor="test")
    parts = [WorkstreamStep(task=f"part-{n}", needs=["prep"], resources=["warehouse"]) for n in "abc"]
    engine.register(
        [Workstream(id="fanout", tenant="acme", steps=[WorkstreamStep(task="prep"), *parts])],
        [ResourceSpec(id="warehouse", max_holders=2)],
    )
    run = engine.start("fanout", token="t1")
    step(world)  # prep runs and succeeds; its end starts two parts at once, the third waits
    now = engine.get_run(run.run_id)
    assert sorted(now.in_state(StepState.RUNNING)) == ["part-a", "part-b"]
    assert now.in_state(StepState.WAITING) == ["part-c"]
    assert len(engine.resource_holders("warehouse")) == 2

    step(world)  # the two parts end: their places are left, and part-c takes one without a poll
    after = engine.get_run(run.run_id)
    assert after.step("part-c").state in (StepState.RUNNING, StepState.SUCCEEDED)
    drive(world)
    done = engine.get_run(run.run_id)
    assert done.state is WorkstreamState.COMPLETED
    assert engine.resource_holders("warehouse") == []


def test_a_step_end_or_a_start_escalation_gave_up_on_is_handled_by_the_sweepers_control_dlq_pass(
    world: MemoryWorld,
) -> None:
    """A ``workstream.step.ended`` that reached the control DLQ (escalation failed on it until
    SQS moved it) used to stay there for an operator, and its workstream waited for ever."""
    import json

    from rebound.domain.events import EventType
    from rebound.engine.sweeper import Sweeper, SweepReport

    engine = ledger(world)
    run = engine.start("nightly-ledger", token="t1")
    relay_all(world)
    world.deliver()  # extract succeeds; its end is in the outbox
    ended = [
        e for e in world.store.events[world.relayed :] if e.detail_type == EventType.WORKSTREAM_STEP_ENDED
    ]
    world.relayed = len(world.store.events)  # escalation never handled them
    for event in ended:
        body = {"detail-type": event.detail_type, "source": "io.rebound", "detail": event.detail}
        world.queues.send("control_dlq", json.dumps(body))
    assert engine.get_run(run.run_id).step("transform").state is StepState.PENDING

    start = {
        "detail-type": "workstream.start",
        "detail": {"workstream_id": "nightly-ledger", "event_id": "e-1"},
    }
    world.queues.send("control_dlq", json.dumps(start))  # a start escalation gave up on

    report = SweepReport()
    Sweeper(world.deps).work_control_dlq(report)

    assert len(report.control_handled) == len(ended) + 1 == 2
    assert engine.get_run(run.run_id).step("transform").state is StepState.RUNNING
    assert "nightly-ledger:evt-e-1" in engine.definition("nightly-ledger")[1]
    assert world.queues.depth("control_dlq") == 0


def test_a_schedule_scheduler_cannot_express_is_refused_naming_the_workstream_and_the_field(
    world: MemoryWorld,
) -> None:
    from rebound.domain.errors import ValidationFailed
    from rebound.domain.schedule_spec import ScheduleSpec
    from rebound.ops.workstreams import WorkstreamOps

    bad = nightly_ledger().model_copy(
        update={
            "schedule": ScheduleSpec.model_construct(
                cron="61 * * * *", timezone="UTC", rate=None, at=None, aws=None
            )
        }
    )
    with pytest.raises(ValidationFailed) as caught:
        WorkstreamOps(world.deps, "test").plan([bad], [])
    assert caught.value.details["key_path"] == "schedule.cron"
    assert caught.value.message.startswith("workstream nightly-ledger: schedule.cron: ")
    assert world.schedules.recurring == {}
