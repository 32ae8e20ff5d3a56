"""An operator's changes to a workstream run: roll back to a checkpoint, resume (from a step), run
the failed steps again, skip or cancel a step, remove a dependency. Pure functions of a
``WorkstreamRun`` and a ``ResourceBook``, as the rules of a run are
(``rebound.domain.workstream_runs``); completed steps are never rolled back, and every step a
change takes off its last task run names that run in ``Progress.replaced``."""

from __future__ import annotations

from datetime import datetime

from rebound.domain.timefmt import iso
from rebound.domain.workstream_runs import (
    DONE,
    STOPPED,
    Checkpoint,
    Progress,
    ResourceBook,
    StepRun,
    StepRunId,
    StepState,
    WorkstreamRefused,
    WorkstreamRun,
    WorkstreamState,
    advance,
    block_dependents,
    checkpoint,
    checkpoint_event,
    ids_of,
    step_run_id,
)
from rebound.domain.workstreams import ancestors, descendants


def rollback(run: WorkstreamRun, target: Checkpoint, resources: ResourceBook, at: datetime) -> Progress:
    """Roll the workstream back to ``target``: cancel running steps, reset queued ones to pending,
    restore step states from the checkpoint, release every resource held, emit
    ``workstream.rolled_back``. Completed steps are never rolled back; ``not_rolled_back`` says
    which steps kept their state and why. The workstream then waits for ``resume``."""
    if target.run_id != run.run_id:
        raise WorkstreamRefused(
            f"checkpoint {target.version} belongs to run {target.run_id}, not {run.run_id}"
        )
    progress = Progress()
    for step in run.steps:
        resources.release(step.resources, run.holder(step))
        if step.state is StepState.RUNNING and step.run_id is not None:
            progress.cancel.append(step.run_id)
            step.run_id = None  # its outcome, when the cancel lands, is no longer this step's
        wanted = target.steps.get(step.step, StepState.PENDING)
        if step.state in DONE:
            if wanted is not step.state:
                progress.not_rolled_back[step.step] = (
                    f"completed ({step.state.value}) after the checkpoint; "
                    "completed steps are never rolled back"
                )
            continue
        if wanted in DONE:
            progress.not_rolled_back[step.step] = (
                f"was {wanted.value} at the checkpoint but is {step.state.value} now; a step cannot be "
                "completed by a rollback: retry or skip it"
            )
            wanted = StepState.PENDING
        if wanted in (StepState.RUNNING, StepState.WAITING, StepState.BLOCKED):
            wanted = StepState.PENDING
        step.state = wanted
        if wanted is StepState.PENDING and step.run_id is not None:
            progress.replaced[step.run_id] = step.step  # a failed try: its run is no longer the step's
            step.run_id = None
        step.waiting_since = None
        step.exhausted_reported = False
        step.ended_at = None if wanted is StepState.PENDING else step.ended_at
    run.state = WorkstreamState.ROLLED_BACK
    run.ended_at = None
    block_dependents(run)
    progress.checkpoint = checkpoint(run, at, f"rolled back to checkpoint {target.version}")
    progress.events.append(
        (
            "workstream.rolled_back",
            {
                **ids_of(run),
                "to_version": target.version,
                "cancelled_runs": list(progress.cancel),
                "not_rolled_back": dict(progress.not_rolled_back),
                "at": iso(at),
            },
        )
    )
    progress.events.append(("workstream.checkpointed", checkpoint_event(progress.checkpoint)))
    return progress


def resume(
    run: WorkstreamRun,
    resources: ResourceBook,
    at: datetime,
    from_step: str | None = None,
    run_ids: StepRunId = step_run_id,
) -> Progress:
    """Carry on: with ``from_step``, that step and every step after it run again (the steps it
    needs must be completed); without, whatever may run starts."""
    if from_step is not None:
        run.step(from_step)
        graph = run.graph
        unmet = sorted(a for a in ancestors(graph, from_step) if run.step(a).state not in DONE)
        if unmet:
            raise WorkstreamRefused(
                f"cannot resume from {from_step}: it needs {', '.join(unmet)}, not completed; "
                "resume from one of those, or skip them",
                step=from_step,
                unmet=unmet,
            )
        running = [s for s in descendants(graph, from_step) if run.step(s).state is StepState.RUNNING]
        if running:
            raise WorkstreamRefused(
                f"cannot resume from {from_step}: {', '.join(sorted(running))} still running"
            )
    progress = Progress()
    if from_step is not None:
        for name in descendants(graph, from_step):
            _reset(run.step(name), progress)
    run.state = WorkstreamState.RUNNING
    cause = f"resumed from {from_step}" if from_step else "resumed"
    return progress.merge(advance(run, resources, at, cause, run_ids))


def retry_failed(
    run: WorkstreamRun, resources: ResourceBook, at: datetime, run_ids: StepRunId = step_run_id
) -> Progress:
    """Run the failed and cancelled steps again (their blocked dependents follow)."""
    stopped = run.in_state(*STOPPED)
    if not stopped:
        raise WorkstreamRefused(f"workstream run {run.run_id} has no failed or cancelled step to retry")
    progress = Progress()
    for name in stopped:
        _reset(run.step(name), progress)
    run.state = WorkstreamState.RUNNING
    return progress.merge(advance(run, resources, at, "retry failed: " + ", ".join(stopped), run_ids))


def skip_step(
    run: WorkstreamRun,
    name: str,
    reason: str,
    resources: ResourceBook,
    at: datetime,
    run_ids: StepRunId = step_run_id,
) -> Progress:
    """Mark a step completed without running it, with a warning and the operator's reason."""
    step = run.step(name)
    if not reason.strip():
        raise WorkstreamRefused("skipping a step needs a reason")
    if step.state is StepState.RUNNING:
        raise WorkstreamRefused(f"step {name} is running; cancel it first")
    if step.state in DONE:
        raise WorkstreamRefused(f"step {name} is already {step.state.value}")
    step.state = StepState.SKIPPED
    step.ended_at = at
    step.reason = reason
    step.warning = f"skipped by an operator: {reason}"
    return _carry_on(run, resources, at, f"{name} skipped", run_ids)


def cancel_step(
    run: WorkstreamRun,
    name: str,
    reason: str,
    resources: ResourceBook,
    at: datetime,
    run_ids: StepRunId = step_run_id,
) -> Progress:
    """Cancel a step (its running task run too) and unblock its dependents: they stop needing it."""
    step = run.step(name)
    if step.state in DONE:
        raise WorkstreamRefused(f"step {name} is already {step.state.value}")
    progress = Progress()
    if step.state is StepState.RUNNING and step.run_id is not None:
        progress.cancel.append(step.run_id)
    resources.release(step.resources, run.holder(step))
    step.state = StepState.CANCELLED
    step.ended_at = at
    step.reason = reason
    for other in run.steps:
        if name in other.needs:
            _drop_need(other, name)
    return progress.merge(_carry_on(run, resources, at, f"{name} cancelled", run_ids))


def remove_dependency(
    run: WorkstreamRun,
    name: str,
    need: str,
    resources: ResourceBook,
    at: datetime,
    run_ids: StepRunId = step_run_id,
) -> Progress:
    step = run.step(name)
    if need not in step.needs:
        raise WorkstreamRefused(
            f"step {name} does not need {need}; it needs {', '.join(step.needs) or 'nothing'}"
        )
    _drop_need(step, need)
    return _carry_on(run, resources, at, f"{name} no longer needs {need}", run_ids)


def _drop_need(step: StepRun, need: str) -> None:
    """``step`` no longer waits for ``need`` in this run (kept in ``removed_needs`` for the record)."""
    step.needs.remove(need)
    step.removed_needs.append(need)


def _carry_on(
    run: WorkstreamRun, resources: ResourceBook, at: datetime, cause: str, run_ids: StepRunId
) -> Progress:
    """After an operator's change: a settled workstream runs again (a rolled-back one waits for resume)."""
    if run.state is not WorkstreamState.ROLLED_BACK:
        run.state = WorkstreamState.RUNNING
    return advance(run, resources, at, cause, run_ids)


def _reset(step: StepRun, progress: Progress) -> None:
    """``step`` back to pending; its last run, which it no longer follows, noted in ``progress``."""
    if step.run_id is not None:
        progress.replaced[step.run_id] = step.step
    step.state = StepState.PENDING
    step.run_id = None
    step.ended_at = None
    step.waiting_since = None
    step.exhausted_reported = False
    step.reason = None
