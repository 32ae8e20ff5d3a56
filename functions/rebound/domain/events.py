"""The events Rebound publishes on its bus, and how each is built from domain objects.

Every event travels through the outbox: it is written in the same DynamoDB transaction as the
state change it describes, so the two cannot diverge. Schemas live in ``events/schemas/``.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from rebound.domain.run import Run, RunState
from rebound.domain.timefmt import iso
from rebound.domain.work_order import WorkOrder


class EventType(StrEnum):
    EXECUTION_UPDATED = "task.execution.updated"
    EXECUTION_FAILED = "task.execution.failed"
    RETRY_SCHEDULED = "task.retry.scheduled"
    DEAD_LETTERED = "task.dead_lettered"
    WORKORDER_CREATED = "workorder.created"
    EXECUTION_WAITING = "task.execution.waiting"
    SLA_BREACHED = "task.sla.breached"
    RUN_RECOVERED = "task.recovered"
    WORKORDER_RESOLVED = "workorder.resolved"
    WORKSTREAM_STARTED = "workstream.started"
    WORKSTREAM_CHECKPOINTED = "workstream.checkpointed"
    WORKSTREAM_COMPLETED = "workstream.completed"
    WORKSTREAM_FAILED = "workstream.failed"
    WORKSTREAM_ROLLED_BACK = "workstream.rolled_back"
    DEPENDENCY_CYCLE_DETECTED = "workstream.dependency_cycle_detected"
    RESOURCE_EXHAUSTED = "workstream.resource_exhausted"
    WORKSTREAM_STEP_ENDED = "workstream.step.ended"


SCHEMA_VERSION: Literal[1] = 1
"""The version of every event's detail today. A field added keeps it; a field removed, renamed or
given another meaning raises that event's version (its model overrides ``schema_version``), and
docs/architecture/events.md says what changed."""


class _Detail(BaseModel):
    """Every event's detail names itself with ``event_id`` (added when it is written to the outbox)
    and says which version of its schema it follows (``schema_version``)."""

    model_config = ConfigDict(extra="forbid")
    schema_version: Literal[1] = Field(
        default=SCHEMA_VERSION, description="the version of this detail's schema (events/schemas)"
    )
    event_id: str | None = Field(default=None, description="unique per event; consumers dedupe on it")


class _RunDetail(_Detail):
    run_id: str
    task_id: str
    tenant: str
    scheduled_for: str = Field(description="the run's logical fire time, ISO 8601 UTC")


class ExecutionUpdated(_RunDetail):
    """A run changed state."""

    state: str
    previous_state: str | None
    attempt: int = Field(ge=0)
    at: str


class ExecutionFailed(_RunDetail):
    """An attempt failed (or a run was refused before any attempt). The retry scheduler decides next."""

    attempt: int = Field(ge=0)
    error_code: str | None
    error_message: str | None
    retryable: bool
    outcome: str = Field(description="failed | timeout | refused")
    at: str


class RetryScheduled(_RunDetail):
    """The next attempt is planned."""

    attempt: int = Field(ge=2, description="the attempt that will run")
    next_retry_at: str
    delay_s: float = Field(ge=0)
    via: Literal["delay_queue", "scheduler"]
    dispatch_reference: str | None


class DeadLettered(_Detail):
    """A run (or an unusable message) was dead-lettered. Escalation opens a work order."""

    subject: str = Field(description="run#<run_id> or msg#<message_id>")
    run_id: str | None
    task_id: str | None
    tenant: str | None
    scheduled_for: str | None = None
    attempts: int = Field(ge=0)
    reason: str
    error_code: str | None
    dead_lettered_at: str
    severity: str
    message_id: str | None


class WorkOrderCreated(_Detail):
    work_order_id: str
    subject: str
    run_id: str | None
    task_id: str | None
    tenant: str | None
    severity: str
    reason: str
    error_code: str | None
    runbook_url: str | None
    opened_at: str


class ExecutionWaiting(_RunDetail):
    """A warning: the run could not start because a slot is taken, or its retry is held because its
    target is unhealthy (``target-unhealthy``); it waits without spending an attempt."""

    attempt: int = Field(ge=1, description="the attempt that is waiting to start")
    reason: Literal["mutex_busy", "tenant_quota", "overlap", "target-unhealthy"]
    slots: list[str]
    holders: list[str] = Field(description="runs inside the busy slots (the target, when it is unhealthy)")
    retry_in_s: float = Field(ge=0, description="until the next poll (an unhealthy target: the next probe)")
    waits: int = Field(ge=1, description="how many times this run has waited")


class SlaBreached(_RunDetail):
    """A run started later, or ran longer, than its task's SLA allows."""

    kind: Literal["start_delay", "duration"]
    observed_s: float
    limit_s: float
    attempt: int = Field(ge=0)


class RunRecovered(_RunDetail):
    """A run that has a work order succeeded (after a retry, redrive or replay). Escalation resolves
    the work order."""

    work_order_id: str
    state: Literal["succeeded"]
    attempt: int = Field(ge=1, description="the attempt that succeeded")
    at: str


class WorkOrderResolved(_Detail):
    """A work order was resolved (by the system or an operator). Escalation sends the resolved
    notice on every channel that was notified."""

    work_order_id: str
    subject: str
    run_id: str | None
    task_id: str | None
    tenant: str | None
    resolution: str
    resolved_by: str
    reason: str | None
    opened_at: str
    resolved_at: str
    time_to_resolve_s: float = Field(ge=0)


class _WorkstreamDetail(_Detail):
    workstream_id: str
    run_id: str = Field(description="the workstream run")
    tenant: str
    at: str


class WorkstreamStarted(_WorkstreamDetail):
    steps: list[str]


class WorkstreamCheckpointed(_WorkstreamDetail):
    """A step changed state; the checkpoint (``version``) records every step's state."""

    version: int = Field(ge=1)
    cause: str
    state: str
    completed: list[str]
    failed: list[str]
    running: list[str]


class WorkstreamCompleted(_WorkstreamDetail):
    warnings: dict[str, str] = Field(description="steps marked completed with a warning (skipped)")
    failed: list[str] = Field(description="non-critical steps that failed")


class WorkstreamFailed(_WorkstreamDetail):
    """A critical step did not complete. Escalation opens one critical work order."""

    failed_steps: list[str]
    failed_scope: Literal["all", "some", "none"]
    critical_failed: bool
    critical_failed_steps: list[str]
    blocked_steps: list[str]
    completed_steps: list[str]
    decision: str


class WorkstreamRolledBack(_WorkstreamDetail):
    to_version: int = Field(ge=1)
    cancelled_runs: list[str]
    not_rolled_back: dict[str, str] = Field(description="step -> why it kept its state")


class DependencyCycleDetected(_WorkstreamDetail):
    """A cycle found when a run started (a later edit made it); no step started."""

    cycle: list[str] = Field(description="the path, ending where it starts")
    tasks: list[str]
    severity: Literal["critical"]


class ResourceExhausted(_WorkstreamDetail):
    """A step has waited longer than the workstream's ``resource_wait`` for its resources."""

    step: str
    resources: list[str]
    holders: dict[str, list[str]]
    waited_s: float = Field(ge=0)
    threshold_s: float = Field(gt=0)


class WorkstreamStepEnded(_RunDetail):
    """A run that is a workstream's step reached a final state; written with that state, so the
    workstream learns of every step's end (``rebound.engine.workstreams``)."""

    workstream_run_id: str
    state: Literal["succeeded", "dead_lettered", "skipped", "cancelled"]
    at: str


DETAIL_MODELS: dict[EventType, type[_Detail]] = {
    EventType.EXECUTION_UPDATED: ExecutionUpdated,
    EventType.EXECUTION_FAILED: ExecutionFailed,
    EventType.RETRY_SCHEDULED: RetryScheduled,
    EventType.DEAD_LETTERED: DeadLettered,
    EventType.WORKORDER_CREATED: WorkOrderCreated,
    EventType.EXECUTION_WAITING: ExecutionWaiting,
    EventType.SLA_BREACHED: SlaBreached,
    EventType.RUN_RECOVERED: RunRecovered,
    EventType.WORKORDER_RESOLVED: WorkOrderResolved,
    EventType.WORKSTREAM_STARTED: WorkstreamStarted,
    EventType.WORKSTREAM_CHECKPOINTED: WorkstreamCheckpointed,
    EventType.WORKSTREAM_COMPLETED: WorkstreamCompleted,
    EventType.WORKSTREAM_FAILED: WorkstreamFailed,
    EventType.WORKSTREAM_ROLLED_BACK: WorkstreamRolledBack,
    EventType.DEPENDENCY_CYCLE_DETECTED: DependencyCycleDetected,
    EventType.RESOURCE_EXHAUSTED: ResourceExhausted,
    EventType.WORKSTREAM_STEP_ENDED: WorkstreamStepEnded,
}


class DomainEvent:
    """An event and its detail, validated against its model when the detail is first read.

    Every event is read, so validated, before it is written (``UnitOfWork.emit``); one the
    environment does not publish is never written, so its detail is never built: a clean run's
    ``task.execution.updated`` costs nothing (``tests/unit/test_published_events.py``)."""

    __slots__ = ("_detail", "_fields", "detail_type")

    def __init__(
        self,
        detail_type: EventType,
        detail: dict[str, Any] | None = None,
        fields: dict[str, Any] | None = None,
    ) -> None:
        self.detail_type = detail_type
        self._detail = detail
        self._fields = fields or {}

    @classmethod
    def of(cls, detail_type: EventType, **fields: Any) -> DomainEvent:
        """An event whose detail is ``fields``, checked against its model (``detail``), so no event
        leaves with a wrong shape."""
        return cls(detail_type, None, fields)

    @property
    def detail(self) -> dict[str, Any]:
        if self._detail is None:
            model = DETAIL_MODELS[self.detail_type].model_validate(self._fields)
            self._detail = model.model_dump(mode="json", exclude={"event_id"})
        return self._detail

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DomainEvent):
            return NotImplemented
        return (self.detail_type, self.detail) == (other.detail_type, other.detail)

    def __hash__(self) -> int:
        return hash(self.detail_type)

    def __repr__(self) -> str:
        shown = self._detail if self._detail is not None else self._fields
        return f"DomainEvent({self.detail_type.value!r}, {shown!r})"


def _run_fields(run: Run) -> dict[str, Any]:
    return {
        "run_id": run.run_id,
        "task_id": run.task_id,
        "tenant": run.tenant,
        "scheduled_for": iso(run.scheduled_for),
    }


def execution_updated(run: Run, previous: RunState | None, at: datetime) -> DomainEvent:
    return DomainEvent.of(
        EventType.EXECUTION_UPDATED,
        **_run_fields(run),
        state=run.state.value,
        previous_state=previous.value if previous else None,
        attempt=run.attempt,
        at=iso(at),
    )


STEP_ENDINGS = frozenset({RunState.SUCCEEDED, RunState.DEAD_LETTERED, RunState.SKIPPED, RunState.CANCELLED})


def step_ended(run: Run, at: datetime) -> DomainEvent | None:
    """``workstream.step.ended`` for a run of a workstream's step that reached a final state."""
    if run.workstream_run is None or run.state not in STEP_ENDINGS:
        return None
    return DomainEvent.of(
        EventType.WORKSTREAM_STEP_ENDED,
        **_run_fields(run),
        workstream_run_id=run.workstream_run,
        state=run.state.value,
        at=iso(at),
    )


def execution_failed(run: Run, *, retryable: bool, at: datetime) -> DomainEvent:
    attempt = run.current_attempt
    return DomainEvent.of(
        EventType.EXECUTION_FAILED,
        **_run_fields(run),
        attempt=run.attempt,
        error_code=run.last_error_code,
        error_message=run.last_error_message,
        retryable=retryable,
        outcome=attempt.outcome.value if attempt else "refused",
        at=iso(at),
    )


def retry_scheduled(run: Run, *, delay_s: float, via: str) -> DomainEvent:
    assert run.next_retry_at is not None
    return DomainEvent.of(
        EventType.RETRY_SCHEDULED,
        **_run_fields(run),
        attempt=run.attempt + 1,
        next_retry_at=iso(run.next_retry_at),
        delay_s=round(delay_s, 3),
        via=via,
        dispatch_reference=run.dispatch_reference,
    )


def dead_lettered(
    *,
    subject: str,
    reason: str,
    at: datetime,
    run: Run | None = None,
    error_code: str | None = None,
    severity: str = "high",
    message_id: str | None = None,
) -> DomainEvent:
    fields: dict[str, Any] = {
        "subject": subject,
        "reason": reason,
        "error_code": error_code,
        "dead_lettered_at": iso(at),
        "severity": severity,
        "message_id": message_id,
        "run_id": None,
        "task_id": None,
        "tenant": None,
        "attempts": 0,
    }
    if run is not None:
        fields.update(_run_fields(run))
        fields["attempts"] = run.attempt
    return DomainEvent.of(EventType.DEAD_LETTERED, **fields)


def workorder_created(order: WorkOrder) -> DomainEvent:
    return DomainEvent.of(
        EventType.WORKORDER_CREATED,
        work_order_id=order.work_order_id,
        subject=order.subject,
        run_id=order.run_id,
        task_id=order.task_id,
        tenant=order.tenant,
        severity=order.severity.value,
        reason=order.reason,
        error_code=order.error_code,
        runbook_url=order.runbook_url,
        opened_at=iso(order.opened_at),
    )


def run_recovered(run: Run, at: datetime) -> DomainEvent:
    assert run.work_order_id is not None
    return DomainEvent.of(
        EventType.RUN_RECOVERED,
        **_run_fields(run),
        work_order_id=run.work_order_id,
        state=run.state.value,
        attempt=run.attempt,
        at=iso(at),
    )


def workorder_resolved(order: WorkOrder) -> DomainEvent:
    assert order.resolved_at is not None and order.resolution is not None
    return DomainEvent.of(
        EventType.WORKORDER_RESOLVED,
        work_order_id=order.work_order_id,
        subject=order.subject,
        run_id=order.run_id,
        task_id=order.task_id,
        tenant=order.tenant,
        resolution=order.resolution.value,
        resolved_by=order.resolved_by or "",
        reason=order.resolve_reason or order.note,
        opened_at=iso(order.opened_at),
        resolved_at=iso(order.resolved_at),
        time_to_resolve_s=round(max(0.0, (order.resolved_at - order.opened_at).total_seconds()), 3),
    )


def execution_waiting(
    run: Run, *, reason: str, slots: list[str], holders: list[str], retry_in_s: float
) -> DomainEvent:
    return DomainEvent.of(
        EventType.EXECUTION_WAITING,
        **_run_fields(run),
        attempt=run.attempt + 1,
        reason=reason,
        slots=slots,
        holders=holders,
        retry_in_s=retry_in_s,
        waits=run.waits,
    )


def sla_breached(run: Run, *, kind: str, observed_s: float, limit_s: float) -> DomainEvent:
    return DomainEvent.of(
        EventType.SLA_BREACHED,
        **_run_fields(run),
        kind=kind,
        observed_s=round(observed_s, 3),
        limit_s=limit_s,
        attempt=run.attempt,
    )


def json_schemas() -> dict[str, dict[str, Any]]:
    """The JSON Schema of each event's ``detail``, keyed by detail type (``events/schemas/``)."""
    out: dict[str, dict[str, Any]] = {}
    for detail_type, model in DETAIL_MODELS.items():
        schema = model.model_json_schema()
        schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
        schema["$id"] = f"rebound/events/{detail_type.value}.json"
        schema["title"] = detail_type.value
        out[detail_type.value] = schema
    return out
