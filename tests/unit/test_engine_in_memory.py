"""The engine's real paths on in-memory ports (``tests/fakes.py``): no moto, no sleeps, a manual clock.

Each test drives the executor, the retry scheduler and escalation as the handlers do, with the
outbox events handed to their consumers by ``MemoryWorld.relay`` (what the bus rules do).
"""

from __future__ import annotations

import pytest
from fakes import MemoryWorld, memory_deps

from rebound.domain.audit import rebuild_run, verify_chain
from rebound.domain.ids import run_subject
from rebound.domain.run import Run, RunState
from rebound.domain.work_order import WorkOrderState
from support import START, fire, register, task

pytestmark = pytest.mark.unit

RUN = "job:20260307T090000Z"


@pytest.fixture
def world() -> MemoryWorld:
    return memory_deps()


def stored(world: MemoryWorld, run_id: str = RUN) -> Run:
    run = world.store.get_run(run_id)
    assert run is not None
    return run


def actions(world: MemoryWorld, run_id: str = RUN) -> list[str]:
    return [r.action for r in world.store.audit_trail(run_subject(run_id))]


def assert_trail_is_the_run(world: MemoryWorld, run_id: str = RUN) -> None:
    run = stored(world, run_id)
    trail = world.store.audit_trail(run_subject(run_id))
    assert verify_chain(run_subject(run_id), trail).ok
    assert (run.audit_seq, run.audit_head) == (trail[-1].seq, trail[-1].hash)
    assert rebuild_run(run_id, trail) == run.model_copy(update={"rev": 0})


def due_now(world: MemoryWorld) -> None:
    """Move the clock to when the next message on the execution queue becomes visible."""
    world.clock.set(max(world.clock.now(), min(m.visible_at for m in world.queues.messages["execution"])))


def test_a_fire_runs_its_task_once_and_the_trail_says_so(world: MemoryWorld) -> None:
    register(world.deps, task("job"))
    assert world.execute(fire("job")) == "succeeded"
    assert world.execute(fire("job"), message_id="m2") == "duplicate"  # a second delivery of the fire

    run = stored(world)
    assert run.state is RunState.SUCCEEDED and run.attempt == 1
    assert [c.run_id for c in world.targets.calls] == [RUN]
    assert actions(world) == ["attempt-started", "attempt-succeeded"]
    # No rule of the stack consumes task.execution.updated: a clean run puts nothing in the outbox.
    assert world.detail_types(run_subject(RUN)) == []
    assert_trail_is_the_run(world)
    assert world.schedules.get("task-job") is not None  # registering wrote the task's schedule
    assert world.metrics.counts["task.execution.success_total"] == 1


@pytest.mark.parametrize(
    ("publish", "expected"),
    [
        (("task.execution.updated",), ["task.execution.updated", "task.execution.updated"]),
        (("*",), ["task.execution.updated", "task.execution.updated"]),
        ((), []),
    ],
)
def test_an_event_no_rule_consumes_is_in_the_outbox_only_where_the_environment_publishes_it(
    publish: tuple[str, ...], expected: list[str]
) -> None:
    world = memory_deps(publish_events=publish)
    register(world.deps, task("job"))
    assert world.execute(fire("job")) == "succeeded"
    assert world.detail_types(run_subject(RUN)) == expected


def test_a_failure_is_in_the_outbox_whatever_the_environment_publishes(world: MemoryWorld) -> None:
    register(world.deps, task("job", target={"type": "sim", "behavior": {"fail_first": 1}}))
    assert world.execute(fire("job")) == "failed"
    # task.execution.failed has a rule (to the retry queue): it is never left out.
    assert world.detail_types(run_subject(RUN)) == ["task.execution.failed"]


def test_a_failed_attempt_is_retried_through_the_delay_queue() -> None:
    world = memory_deps(publish_events=("*",))  # to see task.retry.scheduled, which no rule consumes
    register(world.deps, task("job", target={"type": "sim", "behavior": {"fail_first": 1}}))
    assert world.execute(fire("job")) == "failed"
    assert world.relay() == ["retry-scheduled"]

    run = stored(world)
    assert run.state is RunState.RETRY_SCHEDULED
    [carrier] = world.queues.bodies("execution")
    assert carrier == {"v": 1, "kind": "attempt", "run_id": RUN, "attempt": 2, "dispatch": 1}
    assert world.deliver() == []  # not due yet: the policy's delay (120 s) is on the queue

    due_now(world)
    assert (world.clock.now() - START).total_seconds() == pytest.approx(120)
    assert world.deliver() == ["succeeded"]
    assert actions(world) == [
        "attempt-started",
        "attempt-failed",
        "retry-scheduled",
        "attempt-started",
        "attempt-succeeded",
    ]
    assert "task.retry.scheduled" in world.detail_types()
    assert_trail_is_the_run(world)


def test_a_run_that_exhausts_its_attempts_is_dead_lettered_with_a_work_order(world: MemoryWorld) -> None:
    register(
        world.deps,
        task(
            "job", target={"type": "sim", "behavior": {"always_fail": True}}, retry_policy={"max_attempts": 2}
        ),
    )
    assert world.execute(fire("job")) == "failed"
    assert world.relay() == ["retry-scheduled"]
    due_now(world)
    assert world.deliver() == ["failed"]
    assert world.relay() == ["dead-lettered"]

    run = stored(world)
    assert run.state is RunState.DEAD_LETTERED and run.dead_letter_reason == "attempts_exhausted"
    [dlq] = world.queues.messages["dlq"]
    assert run.dlq_message_id == dlq.message_id
    assert world.queues.bodies("dlq")[0]["kind"] == "replay"

    [order_id] = world.relay()  # the dead letter reaches escalation through the outbox
    [order] = world.store.work_orders(WorkOrderState.OPEN)
    assert order.work_order_id == order_id and order.run_id == RUN
    assert [d.channel for d in order.deliveries] == ["inbox"] and len(world.channel.sent) == 1
    assert stored(world).work_order_id == order_id
    assert actions(world)[-3:] == ["dead-lettered", "dlq-message-sent", "work-order-opened"]
    assert_trail_is_the_run(world)


def test_a_second_run_of_a_mutex_group_waits_for_the_slot_then_runs() -> None:
    world = memory_deps(publish_events=("*",))  # to see task.execution.waiting, which no rule consumes
    register(world.deps, task("a", mutex_group="m"), task("b", mutex_group="m"))
    slot = "slots#mutex#m"
    seen: dict[str, object] = {}

    def b_arrives() -> None:  # while a's attempt runs, holding the slot
        seen["b"] = world.execute(fire("b"), message_id="mb")
        seen["holders"] = (world.store.get_key(slot) or {}).get("holders")

    world.targets.during["a"] = b_arrives
    assert world.execute(fire("a"), message_id="ma") == "succeeded"
    assert seen == {"b": "waiting", "holders": ["a:20260307T090000Z"]}

    b = stored(world, "b:20260307T090000Z")
    assert b.state is RunState.PENDING and b.wait_reason == "mutex_busy" and b.waiting_since == START
    assert "task.execution.waiting" in world.detail_types(run_subject(b.run_id))
    assert "holders" not in (world.store.get_key(slot) or {})  # a left the slot with its outcome

    due_now(world)  # b's next poll, 30 s later
    assert world.deliver() == ["succeeded"]
    assert actions(world, b.run_id) == ["waiting", "attempt-started", "attempt-succeeded"]
    assert_trail_is_the_run(world, b.run_id)
