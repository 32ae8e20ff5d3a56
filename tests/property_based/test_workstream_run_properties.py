"""Workstream runs on random DAGs with random outcomes, resources and rollbacks:

- a step never starts before every step it needs has completed;
- a resource never has more holders than its ``max_holders``;
- a rollback never reverts a completed step;
- the workstream settles: completed exactly when every critical step completed.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from fakes import MemoryResources
from hypothesis import given, settings
from hypothesis import strategies as st

from rebound.domain.run import RunState
from rebound.domain.workstream_recovery import resume, rollback
from rebound.domain.workstream_runs import (
    DONE,
    OPEN,
    Checkpoint,
    Progress,
    StepState,
    WorkstreamRun,
    WorkstreamState,
    new_run,
    record_outcome,
    start,
)
from rebound.domain.workstreams import Workstream, WorkstreamStep

pytestmark = pytest.mark.property_based
T0 = datetime(2026, 3, 7, tzinfo=UTC)
RESOURCES = {"r0": 1, "r1": 2}


@st.composite
def workstreams(draw: st.DrawFn) -> Workstream:
    n = draw(st.integers(min_value=1, max_value=12))
    names = [f"t{i}" for i in range(n)]
    steps = []
    for i, name in enumerate(names):
        needs = draw(st.lists(st.sampled_from(names[:i]), unique=True, max_size=3)) if i else []
        held = draw(st.lists(st.sampled_from(sorted(RESOURCES)), unique=True, max_size=2))
        steps.append(WorkstreamStep(task=name, needs=needs, resources=held, critical=draw(st.booleans())))
    order = draw(st.permutations(steps))
    return Workstream(id="ws", tenant="acme", steps=list(order))


def check_starts(run: WorkstreamRun, progress: Progress) -> None:
    for step in progress.start:
        unmet = [need for need in step.needs if run.step(need).state not in DONE]
        assert not unmet, f"{step.step} started before {unmet} completed"


def check_resources(res: MemoryResources) -> None:
    for resource, holders in res.held.items():
        assert len(holders) <= RESOURCES[resource], f"{resource} held by {holders}"
        assert len(set(holders)) == len(holders)


def play(ws: Workstream, data: st.DataObject, rollbacks: bool) -> tuple[WorkstreamRun, MemoryResources]:
    res = MemoryResources(dict(RESOURCES))
    outsider = data.draw(st.booleans())
    if outsider:  # someone else holds r0 for a while
        res.acquire(["r0"], "other-run/step")
    run = new_run(ws, "run-1", T0)
    progress = start(run, res, T0)
    check_starts(run, progress)
    checkpoints: list[Checkpoint] = [c for c in [progress.checkpoint] if c]
    for tick in range(1, 200):
        at = T0 + timedelta(minutes=tick)
        if outsider and tick == 5:
            res.release(["r0"], "other-run/step")
            outsider = False
        running = [s for s in run.steps if s.state is StepState.RUNNING]
        if rollbacks and checkpoints and data.draw(st.integers(0, 9)) == 0:
            target = data.draw(st.sampled_from(checkpoints))
            completed = {s.step: s.state for s in run.steps if s.state in DONE}
            progress = rollback(run, target, res, at)
            for name, state in completed.items():
                assert run.step(name).state is state, f"rollback reverted completed step {name}"
            assert res.held == {r: [] for r in res.held} or outsider
            progress.merge(resume(run, res, at))
        elif running:
            step = data.draw(st.sampled_from(running))
            final = data.draw(
                st.sampled_from([RunState.SUCCEEDED] * 3 + [RunState.DEAD_LETTERED, RunState.SKIPPED])
            )
            assert step.run_id is not None
            progress = record_outcome(run, step.run_id, final, res, at)
        else:
            from rebound.domain.workstream_runs import advance

            progress = advance(run, res, at, "poll")
        check_starts(run, progress)
        check_resources(res)
        progress.domain_events()  # every event matches its schema
        checkpoints += [c for c in [progress.checkpoint] if c]
        if run.state in (WorkstreamState.COMPLETED, WorkstreamState.FAILED) and not outsider:
            break
    return run, res


@settings(max_examples=200, deadline=None)
@given(ws=workstreams(), data=st.data())
def test_a_step_never_starts_before_its_needs_and_resources_never_overflow(
    ws: Workstream, data: st.DataObject
) -> None:
    run, _ = play(ws, data, rollbacks=False)
    assert not any(s.state in OPEN for s in run.steps), "the workstream settles"
    critical_done = all(s.state in DONE for s in run.steps if s.critical)
    assert (run.state is WorkstreamState.COMPLETED) == critical_done
    assert run.state in (WorkstreamState.COMPLETED, WorkstreamState.FAILED)


@settings(max_examples=200, deadline=None)
@given(ws=workstreams(), data=st.data())
def test_a_rollback_never_reverts_a_completed_step(ws: Workstream, data: st.DataObject) -> None:
    play(ws, data, rollbacks=True)
