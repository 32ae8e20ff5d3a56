"""The run of a workstream: starts, outcomes, blocking, resources, checkpoints, rollback, recovery."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fakes import MemoryResources

from rebound.domain.run import RunState
from rebound.domain.workstream_recovery import (
    cancel_step,
    remove_dependency,
    resume,
    retry_failed,
    rollback,
    skip_step,
)
from rebound.domain.workstream_runs import (
    StepState,
    WorkstreamRefused,
    WorkstreamRun,
    WorkstreamState,
    keep_last,
    new_run,
    record_outcome,
    start,
)
from rebound.domain.workstreams import ResourceSpec, Workstream
from support import nightly_ledger

pytestmark = pytest.mark.unit
T0 = datetime(2026, 3, 7, 1, 0, tzinfo=UTC)


def ledger(report_critical: bool = False) -> Workstream:
    definition: Workstream = nightly_ledger(report_critical)
    return definition


def book(max_holders: int = 1) -> MemoryResources:
    spec = ResourceSpec(id="warehouse-write", max_holders=max_holders)
    return MemoryResources({spec.id: spec.max_holders})


def states(run: WorkstreamRun) -> dict[str, str]:
    return {s.step: s.state.value for s in run.steps}


def finish(run: WorkstreamRun, step: str, final: RunState, res: MemoryResources, minutes: int = 1):  # type: ignore[no-untyped-def]
    run_id = run.step(step).run_id
    assert run_id is not None, f"{step} has no run"
    return record_outcome(run, run_id, final, res, T0 + timedelta(minutes=minutes))


def test_a_run_starts_its_root_steps_only() -> None:
    run = new_run(ledger(), "r1", T0)
    progress = start(run, book(), T0)
    assert [s.step for s in progress.start] == ["extract"]
    assert states(run) == {
        "extract": "running",
        "transform": "pending",
        "load": "pending",
        "report": "pending",
    }
    assert [e.detail_type.value for e in progress.domain_events()] == [
        "workstream.started",
        "workstream.checkpointed",
    ]


def test_each_step_starts_when_its_needs_succeeded_and_the_workstream_completes() -> None:
    run, res = new_run(ledger(), "r1", T0), book()
    start(run, res, T0)
    for minute, step in enumerate(["extract", "transform", "load"], start=1):
        progress = finish(run, step, RunState.SUCCEEDED, res, minute)
        assert len(progress.start) == 1
    progress = finish(run, "report", RunState.SUCCEEDED, res, 4)
    assert run.state is WorkstreamState.COMPLETED
    assert "workstream.completed" in [e.detail_type.value for e in progress.domain_events()]
    assert res.held == {"warehouse-write": []}


def test_a_dead_lettered_step_blocks_its_dependents_and_fails_the_workstream() -> None:
    run, res = new_run(ledger(), "r1", T0), book()
    start(run, res, T0)
    finish(run, "extract", RunState.SUCCEEDED, res)
    progress = finish(run, "transform", RunState.DEAD_LETTERED, res, 2)
    assert states(run) == {
        "extract": "succeeded",
        "transform": "failed",
        "load": "blocked",
        "report": "blocked",
    }
    assert run.state is WorkstreamState.FAILED
    [failed] = [e for e in progress.domain_events() if e.detail_type.value == "workstream.failed"]
    assert failed.detail["failed_steps"] == ["transform"]
    assert failed.detail["failed_scope"] == "some" and failed.detail["critical_failed"] is True
    assert failed.detail["blocked_steps"] == ["load", "report"]


def test_a_non_critical_failure_does_not_fail_the_workstream() -> None:
    run, res = new_run(ledger(report_critical=False), "r1", T0), book()
    start(run, res, T0)
    for step in ("extract", "transform", "load"):
        finish(run, step, RunState.SUCCEEDED, res)
    progress = finish(run, "report", RunState.DEAD_LETTERED, res)
    assert run.state is WorkstreamState.COMPLETED
    [done] = [e for e in progress.domain_events() if e.detail_type.value == "workstream.completed"]
    assert done.detail["failed"] == ["report"]


def test_a_replayed_dead_letter_that_succeeds_unblocks_its_dependents() -> None:
    run, res = new_run(ledger(), "r1", T0), book()
    start(run, res, T0)
    finish(run, "extract", RunState.DEAD_LETTERED, res)
    assert run.state is WorkstreamState.FAILED
    progress = finish(run, "extract", RunState.SUCCEEDED, res, 5)
    assert [s.step for s in progress.start] == ["transform"]
    assert run.state is WorkstreamState.RUNNING


def test_an_outcome_delivered_twice_changes_nothing_the_second_time() -> None:
    run, res = new_run(ledger(), "r1", T0), book()
    start(run, res, T0)
    extract_run = run.step("extract").run_id or ""
    assert record_outcome(run, extract_run, RunState.SUCCEEDED, res, T0).checkpoint is not None
    version = run.checkpoint_version
    again = record_outcome(run, extract_run, RunState.SUCCEEDED, res, T0)
    assert again.checkpoint is None and again.start == [] and run.checkpoint_version == version
    assert run.step("transform").tries == 1


def test_a_step_waits_for_a_full_resource_and_resource_exhausted_is_raised_once() -> None:
    res = book(max_holders=1)
    assert res.acquire(["warehouse-write"], "someone-else")
    run = new_run(ledger(), "r1", T0)
    start(run, res, T0)
    finish(run, "extract", RunState.SUCCEEDED, res)
    finish(run, "transform", RunState.SUCCEEDED, res, 2)
    assert run.step("load").state is StepState.WAITING
    from rebound.domain.workstream_runs import advance

    quiet = advance(run, res, T0 + timedelta(minutes=10), "poll")
    assert quiet.events == []
    late = advance(run, res, T0 + timedelta(minutes=20), "poll")
    [event] = late.domain_events()
    assert event.detail_type.value == "workstream.resource_exhausted"
    assert event.detail["holders"] == {"warehouse-write": ["someone-else"]}
    assert advance(run, res, T0 + timedelta(minutes=30), "poll").events == []
    res.release(["warehouse-write"], "someone-else")
    assert [s.step for s in advance(run, res, T0 + timedelta(minutes=31), "poll").start] == ["load"]


def test_a_cycle_made_by_a_later_edit_is_detected_before_any_step_starts() -> None:
    definition = ledger()
    run = new_run(definition, "r1", T0)
    run.step("extract").needs.append("load")  # what an edit of the stored definition could leave
    progress = start(run, book(), T0)
    assert progress.start == []
    assert run.state is WorkstreamState.FAILED
    cycles = "workstream.dependency_cycle_detected"
    [event] = [e for e in progress.domain_events() if e.detail_type.value == cycles]
    assert event.detail["cycle"] == ["extract", "load", "transform", "extract"]
    assert event.detail["severity"] == "critical"


def through_transform(transform: RunState) -> tuple[WorkstreamRun, MemoryResources, Any]:
    """A run whose extract succeeded and whose transform ended as ``transform``; and its first
    checkpoint (taken at the start)."""
    run, res = new_run(ledger(), "r1", T0), book()
    first = start(run, res, T0)
    assert first.checkpoint is not None
    finish(run, "extract", RunState.SUCCEEDED, res)
    finish(run, "transform", transform, res, 2)
    return run, res, first.checkpoint


def test_rollback_cancels_running_steps_restores_the_checkpoint_and_keeps_completed_steps() -> None:
    run, res, checkpoint = through_transform(RunState.SUCCEEDED)
    running_load = run.step("load").run_id
    assert res.holders("warehouse-write") == ["r1/load"]
    progress = rollback(run, checkpoint, res, T0 + timedelta(minutes=3))
    assert progress.cancel == [running_load]
    assert states(run) == {
        "extract": "succeeded",
        "transform": "succeeded",
        "load": "pending",
        "report": "pending",
    }
    assert set(progress.not_rolled_back) == {"extract", "transform"}
    assert "never rolled back" in progress.not_rolled_back["extract"]
    assert res.holders("warehouse-write") == []
    assert run.state is WorkstreamState.ROLLED_BACK
    [event] = [e for e in progress.domain_events() if e.detail_type.value == "workstream.rolled_back"]
    assert event.detail["to_version"] == 1
    # the cancelled run's outcome no longer belongs to the step
    assert record_outcome(run, running_load or "", RunState.CANCELLED, res, T0).checkpoint is None
    assert resume(run, res, T0 + timedelta(minutes=4)).start[0].step == "load"


def test_resume_from_a_step_reruns_it_and_what_follows_and_refuses_unmet_needs() -> None:
    run, res = new_run(ledger(), "r1", T0), book()
    start(run, res, T0)
    finish(run, "extract", RunState.SUCCEEDED, res)
    finish(run, "transform", RunState.DEAD_LETTERED, res)
    with pytest.raises(WorkstreamRefused, match="needs transform"):
        resume(run, res, T0, from_step="load")
    progress = resume(run, res, T0, from_step="transform")
    assert [s.step for s in progress.start] == ["transform"]
    assert run.step("transform").tries == 2
    assert states(run)["load"] == "pending"


def test_retry_failed_runs_only_the_failed_steps_again() -> None:
    run, res = new_run(ledger(), "r1", T0), book()
    start(run, res, T0)
    finish(run, "extract", RunState.DEAD_LETTERED, res)
    progress = retry_failed(run, res, T0)
    assert [s.step for s in progress.start] == ["extract"]
    with pytest.raises(WorkstreamRefused, match="no failed"):
        retry_failed(run, res, T0)


def test_skip_marks_a_step_completed_with_a_warning_and_its_reason() -> None:
    run, res = new_run(ledger(), "r1", T0), book()
    start(run, res, T0)
    finish(run, "extract", RunState.DEAD_LETTERED, res)
    with pytest.raises(WorkstreamRefused, match="reason"):
        skip_step(run, "extract", " ", res, T0)
    progress = skip_step(run, "extract", "yesterday's extract is good enough", res, T0)
    assert run.step("extract").state is StepState.SKIPPED
    assert run.step("extract").warning == "skipped by an operator: yesterday's extract is good enough"
    assert [s.step for s in progress.start] == ["transform"]


def test_cancel_unblocks_the_dependents_and_remove_dependency_lets_a_step_go() -> None:
    run, res = new_run(ledger(), "r1", T0), book()
    start(run, res, T0)
    extract_run = run.step("extract").run_id
    progress = cancel_step(run, "extract", "source is down", res, T0)
    assert progress.cancel == [extract_run]
    assert [s.step for s in progress.start] == ["transform"]
    assert run.step("transform").removed_needs == ["extract"]
    with pytest.raises(WorkstreamRefused, match="does not need"):
        remove_dependency(run, "load", "extract", res, T0)
    progress = remove_dependency(run, "report", "load", res, T0)
    assert [s.step for s in progress.start] == ["report"]


def test_only_the_last_hundred_checkpoints_are_kept() -> None:
    run, res = new_run(ledger(), "r1", T0), book()
    checkpoints = [start(run, res, T0).checkpoint]
    for minute in range(1, 80):  # extract dead-letters, is retried: two checkpoints each time
        checkpoints.append(finish(run, "extract", RunState.DEAD_LETTERED, res, minute).checkpoint)
        checkpoints.append(retry_failed(run, res, T0 + timedelta(minutes=minute)).checkpoint)
    taken = [c for c in checkpoints if c is not None]
    assert [c.version for c in taken] == list(range(1, run.checkpoint_version + 1))
    kept = keep_last(taken)
    assert [c.version for c in kept] == list(range(run.checkpoint_version - 99, run.checkpoint_version + 1))


def test_a_step_unblocked_by_a_rollback_and_resume_keeps_no_stale_blocked_reason() -> None:
    run, res, checkpoint = through_transform(RunState.DEAD_LETTERED)
    assert run.step("load").reason == "needs transform, which is failed"
    rollback(run, checkpoint, res, T0 + timedelta(minutes=3))
    resume(run, res, T0 + timedelta(minutes=4))
    finish(run, "transform", RunState.SUCCEEDED, res, 5)
    finish(run, "load", RunState.SUCCEEDED, res, 6)
    assert states(run)["load"] == "succeeded"
    assert run.step("load").reason is None
