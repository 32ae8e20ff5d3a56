"""Operator actions racing the engine (issue: trust at the edges). Each test holds the engine at
the moment a race opens (a step's task run has ended, its ``workstream.step.ended`` event still in
the outbox; a dead-lettered step run an operator retried) and checks that the operator's action
neither runs completed work again nor leaves work that can be redriven for nothing."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from fakes import MemoryWorld, memory_deps

from rebound.domain.errors import Conflict
from rebound.domain.run import RunState
from rebound.domain.work_order import Resolution, WorkOrderState
from rebound.domain.workstream_runs import StepState, WorkstreamRefused, WorkstreamState
from rebound.engine.workstreams import Workstreams
from rebound.ops.dlq.message import Arrival, DlqMessage
from rebound.ops.dlq.redrive import Verdict, classify
from rebound.ops.replay import Replays
from rebound.ops.runs import RunOps
from rebound.ops.tasks import TaskOps
from rebound.ops.workstreams import WorkstreamOps
from support import ledger_tasks, nightly_ledger

pytestmark = pytest.mark.unit


@pytest.fixture
def world() -> MemoryWorld:
    return memory_deps()


def ledger(world: MemoryWorld, transform: dict[str, Any] | None = None) -> WorkstreamOps:
    ledger_tasks(world.deps, transform)
    from rebound.domain.workstreams import ResourceSpec

    Workstreams(world.deps, actor="test").register(
        [nightly_ledger()], [ResourceSpec(id="warehouse-write", max_holders=1)]
    )
    return WorkstreamOps(world.deps, actor="ops:alice")


def relay_all(world: MemoryWorld) -> None:
    while len(world.store.events) > world.relayed:
        world.relay()


def drive(world: MemoryWorld, rounds: int = 60) -> None:
    for _ in range(rounds):
        relay_all(world)
        pending = world.queues.messages["execution"]
        if not pending:
            return
        world.clock.set(max(world.clock.now(), min(m.visible_at for m in pending)))
        world.deliver()
    relay_all(world)


def calls(world: MemoryWorld, task_id: str) -> int:
    return sum(1 for c in world.targets.calls if c.task_id.endswith(task_id))


def extract_ended_unrelayed(world: MemoryWorld, ops: WorkstreamOps) -> str:
    """Start the ledger and run its first step's task to success, its end event left in the outbox."""
    run = ops.run("nightly-ledger", token="t1")
    relay_all(world)
    world.deliver()  # extract's target is called and succeeds; workstream.step.ended is not relayed
    extract = world.store.get_run(ops.show(run.run_id).step("extract").run_id or "")
    assert extract is not None and extract.state is RunState.SUCCEEDED
    assert ops.show(run.run_id).step("extract").state is StepState.RUNNING, "the race is open"
    return run.run_id


def test_a_rollback_racing_a_step_s_success_keeps_the_step_completed_and_never_runs_it_again(
    world: MemoryWorld,
) -> None:
    ops = ledger(world)
    run_id = extract_ended_unrelayed(world, ops)
    rolled, progress = ops.rollback(run_id)
    assert rolled.step("extract").state is StepState.SUCCEEDED, "a finished run is the step's outcome"
    assert progress.cancel == [], "nothing of a finished run is cancelled"
    trail = world.store.audit_trail(f"workstream#{run_id}")
    assert "extract" in trail[-1].evidence["reconciled"]
    relay_all(world)  # the late end event changes nothing now
    ops.resume(run_id)
    drive(world)
    assert ops.show(run_id).state is WorkstreamState.COMPLETED
    assert calls(world, "extract") == 1, "the completed step's target was called once"


def test_cancelling_a_step_whose_run_just_succeeded_is_refused_not_silently_ignored(
    world: MemoryWorld,
) -> None:
    ops = ledger(world)
    run_id = extract_ended_unrelayed(world, ops)
    with pytest.raises(WorkstreamRefused, match="step extract is already succeeded"):
        ops.cancel_step(run_id, "extract", "operator thought it hung")
    assert ops.show(run_id).step("extract").state is StepState.RUNNING, "the refusal changed nothing"
    drive(world)
    assert ops.show(run_id).state is WorkstreamState.COMPLETED
    assert calls(world, "extract") == 1


def dead_lettered_transform(
    world: MemoryWorld, behavior: dict[str, Any] | None = None
) -> tuple[WorkstreamOps, str, str]:
    ops = ledger(world, transform=behavior or {"terminal_error": "BAD_INPUT"})
    run = ops.run("nightly-ledger", token="t1")
    drive(world)
    failed = ops.show(run.run_id)
    assert failed.state is WorkstreamState.FAILED
    old = failed.step("transform").run_id or ""
    stored = world.store.get_run(old)
    assert stored is not None and stored.state is RunState.DEAD_LETTERED
    return ops, run.run_id, old


def test_retry_failed_supersedes_the_old_dead_lettered_step_run(world: MemoryWorld) -> None:
    ops, run_id, old = dead_lettered_transform(world)
    order = next(o for o in world.store.work_orders() if o.run_id == old)
    assert order.state is not WorkOrderState.RESOLVED
    retried, _ = ops.retry_failed(run_id)
    new = retried.step("transform").run_id
    assert new is not None and new != old
    superseded = world.store.get_run(old)
    assert superseded is not None and superseded.state is RunState.SUPERSEDED
    assert superseded.superseded_by == new
    closed = world.store.get_work_order(order.work_order_id)
    assert closed is not None and closed.state is WorkOrderState.RESOLVED
    assert closed.resolution is Resolution.SUPERSEDED
    with pytest.raises(Conflict, match=f"superseded by {new}"):
        RunOps(world.deps, actor="ops:bob").retry(old)
    assert classify_superseded(world, old)[0] is Verdict.CLEAN_UP
    assert world.store.audit_trail(f"run#{old}")[-1].action == "superseded"


def classify_superseded(world: MemoryWorld, run_id: str) -> tuple[Verdict, str]:
    """How a bulk redrive treats a DLQ message of ``run_id``."""
    run = world.store.get_run(run_id)
    assert run is not None
    message = DlqMessage(
        kind="execution",
        run_id=run_id,
        task_id=run.task_id,
        tenant=run.tenant,
        error_code="BAD_INPUT",
        reason="terminal",
        dead_lettered_at=world.clock.now(),
        attempts=1,
        message_id="m-old",
        body="{}",
        attributes={},
        sent_at=world.clock.now(),
        receive_count=1,
        arrival=Arrival.EXPLICIT,
    )
    return classify(message, run, set(), Replays(world.deps, "ops:bob"))


def test_a_step_run_an_operator_retried_is_followed_again_and_not_retried_twice(world: MemoryWorld) -> None:
    ops, run_id, old = dead_lettered_transform(world, {"fail_first": 3})  # its three attempts fail
    RunOps(world.deps, actor="ops:bob").retry(old)  # the task run is replayed, outside the workstream
    with pytest.raises(WorkstreamRefused, match="no failed or cancelled step"):
        ops.retry_failed(run_id)
    assert ops.show(run_id).step("transform").run_id == old, "no second run of the step was started"
    before = calls(world, "transform")
    drive(world)
    assert calls(world, "transform") == before + 1, "only the operator's replay ran the step again"
    done = ops.show(run_id)
    assert done.step("transform").state is StepState.SUCCEEDED and done.step("transform").run_id == old
    assert done.state is WorkstreamState.COMPLETED


def test_the_same_start_token_names_the_same_run_a_day_later(world: MemoryWorld) -> None:
    ops = ledger(world)
    first = ops.run("nightly-ledger", token="deploy-42")
    world.clock.advance(timedelta(days=1, hours=3).total_seconds())
    again = ops.run("nightly-ledger", token="deploy-42")
    assert again.run_id == first.run_id
    assert ops.runs("nightly-ledger") == [first.run_id]
    tasks = TaskOps(world.deps, actor="ops:alice")
    run = tasks.run_now("extract", token="deploy-42")
    world.clock.advance(timedelta(days=2).total_seconds())
    assert tasks.run_now("extract", token="deploy-42") == run
    assert tasks.run_now("extract") != tasks.run_now("extract"), "without a token each request is new"


def test_a_step_run_superseded_before_its_dead_letter_event_arrives_pages_nobody(world: MemoryWorld) -> None:
    """retry-failed at the instant the step's run dead-letters: its ``task.dead_lettered`` event is
    still in the outbox, so no work order is open yet, and none is opened for it afterwards."""
    ops = ledger(world, transform={"terminal_error": "BAD_INPUT"})
    run_id = ops.run("nightly-ledger", token="t1").run_id

    def transform_dead() -> str | None:
        step_run = ops.show(run_id).step("transform").run_id
        stored = world.store.get_run(step_run) if step_run else None
        return step_run if stored is not None and stored.state is RunState.DEAD_LETTERED else None

    for _ in range(60):  # one relay pass or one delivery at a time, until the dead letter commits
        if transform_dead():
            break
        if len(world.store.events) > world.relayed:
            world.relay()
            continue
        pending = world.queues.messages["execution"]
        world.clock.set(max(world.clock.now(), min(m.visible_at for m in pending)))
        world.deliver()
    old = transform_dead()
    assert old is not None and not [o for o in world.store.work_orders() if o.run_id == old]
    retried, _ = ops.retry_failed(run_id)
    assert retried.step("transform").run_id != old
    relay_all(world)  # the late dead-letter event of the superseded run
    assert [o for o in world.store.work_orders() if o.run_id == old] == [], "nobody is paged for it"
    superseded = world.store.get_run(old)
    assert superseded is not None and superseded.state is RunState.SUPERSEDED
