"""The events Rebound publishes on its bus, and how each is built from domain objects.

Every event travels through the outbox: it is written in the same DynamoDB transaction as the
state change it describes, so the two cannot diverge. Schemas live in ``events/schemas/``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from rebound.domain.models import Run, RunState, WorkOrder
from rebound.domain.timefmt import iso


class EventType(StrEnum):
    EXECUTION_UPDATED = "task.execution.updated"
    EXECUTION_FAILED = "task.execution.failed"
    RETRY_SCHEDULED = "task.retry.scheduled"
    DEAD_LETTERED = "task.dead_lettered"
    WORKORDER_CREATED = "workorder.created"


@dataclass(frozen=True)
class DomainEvent:
    detail_type: EventType
    detail: dict[str, Any]


def _run_fields(run: Run) -> dict[str, Any]:
    return {
        "run_id": run.run_id,
        "task_id": run.task_id,
        "tenant": run.tenant,
        "scheduled_for": iso(run.scheduled_for),
    }


def execution_updated(run: Run, previous: RunState | None, at: datetime) -> DomainEvent:
    return DomainEvent(
        EventType.EXECUTION_UPDATED,
        {
            **_run_fields(run),
            "state": run.state.value,
            "previous_state": previous.value if previous else None,
            "attempt": run.attempt,
            "at": iso(at),
        },
    )


def execution_failed(run: Run, *, retryable: bool, at: datetime) -> DomainEvent:
    attempt = run.current_attempt
    return DomainEvent(
        EventType.EXECUTION_FAILED,
        {
            **_run_fields(run),
            "attempt": run.attempt,
            "error_code": run.last_error_code,
            "error_message": run.last_error_message,
            "retryable": retryable,
            "outcome": attempt.outcome.value if attempt else "failed",
            "at": iso(at),
        },
    )


def retry_scheduled(run: Run, *, delay_s: float, via: str) -> DomainEvent:
    assert run.next_retry_at is not None
    return DomainEvent(
        EventType.RETRY_SCHEDULED,
        {
            **_run_fields(run),
            "attempt": run.attempt + 1,
            "next_retry_at": iso(run.next_retry_at),
            "delay_s": round(delay_s, 3),
            "via": via,
            "dispatch_reference": run.dispatch_reference,
        },
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
    detail: dict[str, Any] = {
        "subject": subject,
        "reason": reason,
        "error_code": error_code,
        "dead_lettered_at": iso(at),
        "severity": severity,
        "message_id": message_id,
    }
    if run is not None:
        detail.update(_run_fields(run))
        detail["attempts"] = run.attempt
    else:
        detail.update({"run_id": None, "task_id": None, "tenant": None, "attempts": 0})
    return DomainEvent(EventType.DEAD_LETTERED, detail)


def workorder_created(order: WorkOrder) -> DomainEvent:
    return DomainEvent(
        EventType.WORKORDER_CREATED,
        {
            "work_order_id": order.work_order_id,
            "subject": order.subject,
            "run_id": order.run_id,
            "task_id": order.task_id,
            "tenant": order.tenant,
            "severity": order.severity.value,
            "reason": order.reason,
            "error_code": order.error_code,
            "runbook_url": order.runbook_url,
            "opened_at": iso(order.opened_at),
        },
    )
