"""The run of a workstream: which steps may start, what a step's outcome does to the others, and
checkpoints. The operator's changes (rollback, resume, retry-failed, skip, cancel a step, remove a
dependency) are ``rebound.domain.workstream_recovery``.

Everything here is a pure function of a ``WorkstreamRun`` (changed in place on a copy the caller
owns) plus a ``ResourceBook`` (who holds which resource), so the rules can be tested on random
graphs without AWS. A step is started by starting one run of its task; that run goes through the
normal retry loop, and only its final state (``succeeded``, ``dead_lettered``, ``skipped``,
``cancelled``) comes back here (``record_outcome``).

Step states:

- ``pending``: waits for its needs; ``waiting``: its needs succeeded, a resource it needs is full;
- ``running``: its task run is under way (it holds its resources);
- ``succeeded``; ``skipped`` (marked completed by an operator, with a warning and a reason, or its
  run was skipped): both count as done for the steps that need it, and neither is ever rolled back;
- ``failed`` (its run dead-lettered) and ``cancelled``: its dependents become ``blocked``.

The workstream is ``running`` while a step is pending, waiting or running; then ``completed``, or
``failed`` when a critical step failed, was cancelled or is blocked (a non-critical step's failure
does not fail it, but its dependents stay blocked). After a rollback it is ``rolled_back`` and
starts nothing until it is resumed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol

from pydantic import BaseModel, Field

from rebound.domain.errors import DomainError, IllegalTransition
from rebound.domain.events import DomainEvent, EventType
from rebound.domain.run import RunState
from rebound.domain.timefmt import UtcDatetime, iso
from rebound.domain.workstreams import (
    Workstream,
    cycle_text,
    find_cycle,
    foreign_step,
)

CHECKPOINTS_KEPT = 100


class StepState(StrEnum):
    PENDING = "pending"
    WAITING = "waiting"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    SKIPPED = "skipped"
    FAILED = "failed"
    CANCELLED = "cancelled"
    BLOCKED = "blocked"


DONE = frozenset({StepState.SUCCEEDED, StepState.SKIPPED})
"""Completed steps: they satisfy their dependents and are never rolled back."""
STOPPED = frozenset({StepState.FAILED, StepState.CANCELLED})
"""Steps that ended without completing: their dependents are blocked."""
OPEN = frozenset({StepState.PENDING, StepState.WAITING, StepState.RUNNING})


class WorkstreamState(StrEnum):
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    ROLLED_BACK = "rolled_back"


class WorkstreamRefused(DomainError):
    """An operation the workstream's state does not allow; the message says why."""

    code = "WORKSTREAM_REFUSED"
    http_status = 409


class StepRun(BaseModel):
    step: str
    task_id: str
    needs: list[str] = Field(default_factory=list)
    removed_needs: list[str] = Field(default_factory=list, description="dependencies an operator removed")
    resources: list[str] = Field(default_factory=list)
    critical: bool = True
    state: StepState = StepState.PENDING
    run_id: str | None = Field(default=None, description="the task run of the current try")
    tries: int = Field(default=0, ge=0, description="task runs started for this step")
    started_at: UtcDatetime | None = None
    ended_at: UtcDatetime | None = None
    waiting_since: UtcDatetime | None = None
    exhausted_reported: bool = False
    reason: str | None = Field(default=None, description="why it is blocked, skipped or cancelled")
    warning: str | None = None


class Checkpoint(BaseModel):
    """The workstream after one step transition, in the shape of the recovery procedures."""

    workstream_id: str
    run_id: str
    tenant: str
    version: int = Field(ge=1)
    at: UtcDatetime
    cause: str
    state: WorkstreamState
    completed: list[str]
    failed: list[str]
    pending: list[str]
    running: list[str]
    blocked: list[str]
    resources_held: dict[str, list[str]]
    steps: dict[str, StepState]


class WorkstreamRun(BaseModel):
    workstream_id: str
    run_id: str
    tenant: str
    state: WorkstreamState = WorkstreamState.RUNNING
    started_at: UtcDatetime
    ended_at: UtcDatetime | None = None
    steps: list[StepRun]
    resource_wait_s: float
    checkpoint_version: int = Field(default=0, ge=0)
    reason: str | None = None
    work_order_id: str | None = None
    audit_seq: int = 0
    audit_head: str = "0" * 64

    def step(self, name: str) -> StepRun:
        for step in self.steps:
            if step.step == name:
                return step
        raise WorkstreamRefused(
            f"workstream {self.workstream_id} has no step {name!r}; its steps: "
            + ", ".join(s.step for s in self.steps),
            step=name,
        )

    @property
    def graph(self) -> dict[str, list[str]]:
        return {s.step: list(s.needs) for s in self.steps}

    def in_state(self, *states: StepState) -> list[str]:
        return [s.step for s in self.steps if s.state in states]

    def holder(self, step: StepRun) -> str:
        return f"{self.run_id}/{step.step}"


class ResourceBook(Protocol):
    """Who holds which resource. ``acquire`` takes all of ``resources`` for ``holder`` or none
    (so two steps never each hold half of what they need); taking what it already holds is a no-op."""

    def acquire(self, resources: list[str], holder: str) -> bool: ...

    def release(self, resources: list[str], holder: str) -> None: ...

    def holders(self, resource: str) -> list[str]: ...


@dataclass
class Progress:
    """What one transition did: the task runs to start and to cancel, the events to emit
    (detail type, fields), and the checkpoint taken (if any step changed)."""

    start: list[StepRun] = field(default_factory=list)
    cancel: list[str] = field(default_factory=list)
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    checkpoint: Checkpoint | None = None
    not_rolled_back: dict[str, str] = field(default_factory=dict)
    replaced: dict[str, str] = field(default_factory=dict)
    """Task runs a step no longer follows (reset, rolled back), with the step: the engine closes a
    dead-lettered one as superseded, so that it is never redriven for nothing."""
    replaced_by: str | None = None
    """What took their work over when no new run of the step starts in this change (a new run of
    the whole workstream); by default the step's next run, else this workstream run."""

    def domain_events(self) -> list[DomainEvent]:
        """The events, each validated against its schema's model."""
        return [DomainEvent.of(EventType(kind), **fields) for kind, fields in self.events]

    def merge(self, other: Progress) -> Progress:
        self.start += other.start
        self.cancel += other.cancel
        self.events += other.events
        self.checkpoint = other.checkpoint or self.checkpoint
        self.not_rolled_back.update(other.not_rolled_back)
        self.replaced.update(other.replaced)
        return self


StepRunId = Callable[[WorkstreamRun, StepRun], str]


def step_run_id(run: WorkstreamRun, step: StepRun) -> str:
    """The task run id of a step's try: unique per workstream run, step and try."""
    return f"{step.task_id}:ws-{run.run_id}-{step.step}-{step.tries}"


# --------------------------------------------------------------------------- starting


def new_run(workstream: Workstream, run_id: str, at: datetime) -> WorkstreamRun:
    """A run of ``workstream``; refused if a step names another tenant's task (a definition stored
    before ``tasks apply`` refused that: its steps' runs would be the other tenant's)."""
    for step in workstream.steps:
        why = foreign_step(workstream, step.task_id)
        if why is not None:
            raise WorkstreamRefused(f"step {step.task!r}: {why}", step=step.task)
    return WorkstreamRun(
        workstream_id=workstream.id,
        run_id=run_id,
        tenant=workstream.tenant,
        started_at=at,
        resource_wait_s=workstream.resource_wait,
        steps=[
            StepRun(
                step=s.task,
                task_id=s.task_id,
                needs=list(s.needs),
                resources=list(s.resources),
                critical=s.critical,
            )
            for s in workstream.steps
        ],
    )


def start(
    run: WorkstreamRun, resources: ResourceBook, at: datetime, run_ids: StepRunId = step_run_id
) -> Progress:
    """Start a new workstream run: refuse a dependency cycle (it can appear through a later edit)
    before any step starts, else start its root steps."""
    cycle = find_cycle(run.graph)
    progress = Progress()
    if cycle is not None:
        run.state = WorkstreamState.FAILED
        run.ended_at = at
        run.reason = f"dependency cycle: {cycle_text(cycle)}"
        for step in run.steps:
            if step.step in cycle:
                step.state = StepState.BLOCKED
                step.reason = run.reason
        progress.events.append(
            (
                "workstream.dependency_cycle_detected",
                {
                    **ids_of(run),
                    "cycle": cycle,
                    "tasks": sorted(set(cycle)),
                    "severity": "critical",
                    "at": iso(at),
                },
            )
        )
        progress.checkpoint = checkpoint(run, at, "dependency_cycle_detected")
        return progress
    progress.events.append(
        ("workstream.started", {**ids_of(run), "steps": [s.step for s in run.steps], "at": iso(at)})
    )
    return progress.merge(advance(run, resources, at, "started", run_ids))


def advance(
    run: WorkstreamRun, resources: ResourceBook, at: datetime, cause: str, run_ids: StepRunId = step_run_id
) -> Progress:
    """Block what cannot run, start what may, note steps waiting too long for a resource, settle
    the workstream when nothing is left to do, and take a checkpoint if anything changed."""
    progress = Progress()
    before = _fingerprint(run)
    block_dependents(run)
    if run.state is not WorkstreamState.ROLLED_BACK:
        for step in run.steps:
            if step.state not in (StepState.PENDING, StepState.WAITING):
                continue
            if not all(run.step(need).state in DONE for need in step.needs):
                continue
            holder = run.holder(step)
            if resources.acquire(step.resources, holder):
                step.tries += 1
                step.state = StepState.RUNNING
                step.run_id = run_ids(run, step)
                step.started_at = at
                step.ended_at = None
                step.waiting_since = None
                step.exhausted_reported = False
                progress.start.append(step)
            else:
                if step.state is StepState.PENDING:
                    step.state = StepState.WAITING
                    step.waiting_since = at
                assert step.waiting_since is not None
                waited = (at - step.waiting_since).total_seconds()
                if waited > run.resource_wait_s and not step.exhausted_reported:
                    step.exhausted_reported = True
                    progress.events.append(
                        (
                            "workstream.resource_exhausted",
                            {
                                **ids_of(run),
                                "step": step.step,
                                "resources": list(step.resources),
                                "holders": {r: resources.holders(r) for r in step.resources},
                                "waited_s": round(waited, 3),
                                "threshold_s": run.resource_wait_s,
                                "at": iso(at),
                            },
                        )
                    )
        progress.events += _settle(run, at)
    if _fingerprint(run) != before:
        progress.checkpoint = checkpoint(run, at, cause)
        progress.events.append(("workstream.checkpointed", checkpoint_event(progress.checkpoint)))
    return progress


BLOCKED_BY = "needs "
"""How a blocked step's reason begins (an operator's reasons are on skipped or cancelled steps)."""


def block_dependents(run: WorkstreamRun) -> None:
    """Blocked is derived: a pending or waiting step with a need that failed, was cancelled or is
    blocked. Recomputed from scratch, so a step whose failed need later succeeds is unblocked."""
    for step in run.steps:
        if (
            step.state is StepState.BLOCKED
            and step.reason is not None
            and step.reason.startswith("dependency")
        ):
            continue  # a cycle blocks until the definition is fixed
        if step.state is StepState.BLOCKED:
            step.state = StepState.PENDING
            step.reason = None
        elif (
            step.reason is not None
            and step.reason.startswith(BLOCKED_BY)
            and step.state not in STOPPED | {StepState.SKIPPED}
        ):
            step.reason = None  # a block's reason goes with the block (a rollback restores the state only)
    changed = True
    while changed:
        changed = False
        for step in run.steps:
            if step.state not in (StepState.PENDING, StepState.WAITING):
                continue
            bad = [n for n in step.needs if run.step(n).state in STOPPED | {StepState.BLOCKED}]
            if bad:
                step.state = StepState.BLOCKED
                step.waiting_since = None
                step.reason = f"{BLOCKED_BY}{bad[0]}, which is {run.step(bad[0]).state.value}"
                changed = True


def _settle(run: WorkstreamRun, at: datetime) -> list[tuple[str, dict[str, Any]]]:
    if any(s.state in OPEN for s in run.steps):
        run.state = WorkstreamState.RUNNING
        run.ended_at = None
        return []
    failed = [s for s in run.steps if s.state in STOPPED]
    critical = [s.step for s in run.steps if s.critical and s.state not in DONE]
    new_state = WorkstreamState.FAILED if critical else WorkstreamState.COMPLETED
    if run.state is new_state:
        return []
    run.state = new_state
    run.ended_at = at
    if new_state is WorkstreamState.COMPLETED:
        warnings = {s.step: s.warning for s in run.steps if s.warning}
        return [
            (
                "workstream.completed",
                {**ids_of(run), "warnings": warnings, "failed": [s.step for s in failed], "at": iso(at)},
            )
        ]
    run.reason = "critical steps did not complete: " + ", ".join(critical)
    return [("workstream.failed", {**ids_of(run), **failure_evidence(run), "at": iso(at)})]


def failure_evidence(run: WorkstreamRun) -> dict[str, Any]:
    """The recovery procedures' workstream decision tree, as evidence for the work order: which
    steps failed, whether all or only some did, whether a critical one did, and what to do."""
    failed = [s for s in run.steps if s.state in STOPPED]
    blocked = [s.step for s in run.steps if s.state is StepState.BLOCKED]
    completed = [s.step for s in run.steps if s.state in DONE]
    critical_failed = [s.step for s in failed if s.critical]
    if failed and len(failed) == len(run.steps):
        scope, advice = (
            "all",
            "every step failed: look for a shared cause (a target, credentials) before retrying",
        )
    elif critical_failed:
        scope = "some"
        advice = (
            "a critical step failed: fix it, then `rebound workstreams retry-failed` (or resume --from it)"
        )
    elif failed:
        scope = "some"
        advice = "only non-critical steps failed, but a critical step depends on one: skip or fix it"
    else:
        scope, advice = "none", "no step failed: a critical step is blocked by a cycle or a removed step"
    return {
        "failed_steps": [s.step for s in failed],
        "failed_scope": scope,
        "critical_failed": bool(critical_failed),
        "critical_failed_steps": critical_failed,
        "blocked_steps": blocked,
        "completed_steps": completed,
        "decision": advice,
    }


# --------------------------------------------------------------------------- outcomes


OUTCOMES = {
    RunState.SUCCEEDED: StepState.SUCCEEDED,
    RunState.SKIPPED: StepState.SKIPPED,
    RunState.DEAD_LETTERED: StepState.FAILED,
    RunState.CANCELLED: StepState.CANCELLED,
}
"""A step's state once its task run reached each final state."""
RUN_ACTIVE = frozenset(
    {RunState.PENDING, RunState.RUNNING, RunState.FAILED, RunState.RETRY_SCHEDULED, RunState.REPLAYED}
)


def settle_outcome(
    run: WorkstreamRun, task_run_id: str, final: RunState, resources: ResourceBook, at: datetime
) -> StepRun | None:
    """The step whose task run ``task_run_id`` reached ``final``, now in its state, its resources
    released, nothing started; ``None`` when no step follows that run any more (a try before a
    rollback or a retry), or the outcome is recorded already."""
    if final is RunState.SUPERSEDED:
        return None  # its step follows another run now
    if final not in OUTCOMES:
        raise IllegalTransition(final.value, "a step outcome", task_run_id)
    step = next((s for s in run.steps if s.run_id == task_run_id), None)
    new_state = OUTCOMES[final]
    if step is None or step.state is new_state or step.state in DONE:
        return None
    if step.state not in (StepState.RUNNING, StepState.FAILED, StepState.CANCELLED):
        return None
    resources.release(step.resources, run.holder(step))
    step.state = new_state
    step.ended_at = at
    if new_state is StepState.SKIPPED:
        step.warning = "its task run was skipped; counted as completed"
    return step


def record_outcome(
    run: WorkstreamRun,
    task_run_id: str,
    final: RunState,
    resources: ResourceBook,
    at: datetime,
    run_ids: StepRunId = step_run_id,
) -> Progress:
    """A step's task run reached a final state. An outcome of a run the step no longer follows (a
    try before a rollback or a retry), or one already recorded, changes nothing: the outbox
    delivers at least once."""
    step = settle_outcome(run, task_run_id, final, resources, at)
    if step is None:
        return Progress()
    return advance(run, resources, at, f"{step.step} {step.state.value}", run_ids)


def reconcile(
    run: WorkstreamRun, states: Mapping[str, RunState], resources: ResourceBook, at: datetime
) -> dict[str, str]:
    """Before an operator's change, the steps as their task runs are now (``states``, by run id),
    where the ``workstream.step.ended`` event is still on its way: a running step whose run ended
    takes that outcome (a finished run is the step's outcome, never cancelled, never run again);
    a failed or cancelled step whose run runs again (an operator retried it) is running. Nothing
    starts here: the change decides what runs next. Each step changed, with why."""
    changed: dict[str, str] = {}
    for step in run.steps:
        state = states.get(step.run_id) if step.run_id is not None else None
        if state is None:
            continue
        if step.state is StepState.RUNNING and state in OUTCOMES:
            settle_outcome(run, str(step.run_id), state, resources, at)
            changed[step.step] = f"its run {step.run_id} is {state.value}"
        elif step.state in (StepState.FAILED, StepState.CANCELLED) and state in RUN_ACTIVE:
            step.state = StepState.RUNNING
            step.ended_at = None
            changed[step.step] = f"its run {step.run_id} is {state.value} again"
        elif step.state is StepState.FAILED and state in (RunState.SUCCEEDED, RunState.SKIPPED):
            settle_outcome(run, str(step.run_id), state, resources, at)
            changed[step.step] = f"its run {step.run_id} is {state.value}"
    return changed


# --------------------------------------------------------------------------- checkpoints


def checkpoint(run: WorkstreamRun, at: datetime, cause: str) -> Checkpoint:
    run.checkpoint_version += 1
    held: dict[str, list[str]] = {}
    for step in run.steps:
        if step.state is StepState.RUNNING:
            for resource in step.resources:
                held.setdefault(resource, []).append(step.step)
    return Checkpoint(
        workstream_id=run.workstream_id,
        run_id=run.run_id,
        tenant=run.tenant,
        version=run.checkpoint_version,
        at=at,
        cause=cause,
        state=run.state,
        completed=run.in_state(*DONE),
        failed=run.in_state(*STOPPED),
        pending=run.in_state(StepState.PENDING, StepState.WAITING),
        running=run.in_state(StepState.RUNNING),
        blocked=run.in_state(StepState.BLOCKED),
        resources_held=held,
        steps={s.step: s.state for s in run.steps},
    )


def keep_last(checkpoints: list[Checkpoint], count: int = CHECKPOINTS_KEPT) -> list[Checkpoint]:
    return sorted(checkpoints, key=lambda c: c.version)[-count:]


def ids_of(run: WorkstreamRun) -> dict[str, Any]:
    return {"workstream_id": run.workstream_id, "run_id": run.run_id, "tenant": run.tenant}


def checkpoint_event(cp: Checkpoint) -> dict[str, Any]:
    return {
        "workstream_id": cp.workstream_id,
        "run_id": cp.run_id,
        "tenant": cp.tenant,
        "version": cp.version,
        "cause": cp.cause,
        "state": cp.state.value,
        "completed": cp.completed,
        "failed": cp.failed,
        "running": cp.running,
        "at": iso(cp.at),
    }


def _fingerprint(run: WorkstreamRun) -> tuple[Any, ...]:
    return (run.state, tuple((s.step, s.state, s.run_id, tuple(s.needs)) for s in run.steps))
