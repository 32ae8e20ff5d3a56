"""A work order: why it was opened, its state and resolution, and each delivery to a channel."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, Field

from rebound.domain.basics import Severity
from rebound.domain.timefmt import UtcDatetime


class WorkOrderState(StrEnum):
    OPEN = "open"
    ACKNOWLEDGED = "acknowledged"
    RESOLVED = "resolved"


class Resolution(StrEnum):
    REPLAYED = "replayed"
    SKIPPED = "skipped"
    FIXED = "fixed"
    CANCELLED = "cancelled"
    SUPERSEDED = "superseded"


class DeliveryStatus(StrEnum):
    DELIVERED = "delivered"
    FAILED = "failed"


class Delivery(BaseModel):
    channel: str
    status: DeliveryStatus
    at: UtcDatetime
    attempts: int = 1
    detail: str = ""
    ref: str | None = Field(
        default=None,
        description="what the receiver named the message, for following it up (Slack: channel/ts)",
    )


class WorkOrder(BaseModel):
    work_order_id: str
    subject: str
    run_id: str | None = None
    task_id: str | None = None
    tenant: str | None = None
    state: WorkOrderState = WorkOrderState.OPEN
    severity: Severity = Severity.HIGH
    reason: str
    error_code: str | None = None
    attempts: int = 0
    runbook_url: str | None = None
    message_id: str | None = None
    opened_at: UtcDatetime
    acknowledged_at: UtcDatetime | None = None
    acknowledged_by: str | None = None
    resolved_at: UtcDatetime | None = None
    resolved_by: str | None = None
    resolution: Resolution | None = None
    note: str | None = None
    deliveries: list[Delivery] = Field(default_factory=list)
    resolve_deliveries: list[Delivery] = Field(
        default_factory=list, description="the resolved notice on each channel, once resolved"
    )
    occurrences: list[str] = Field(
        default_factory=list,
        description="when its subject failed again while the order was open (a flapping run)",
    )
    resolve_reason: str | None = None
    level: int | None = Field(
        default=None,
        ge=1,
        le=4,
        description="escalation level 1-4 (rebound.domain.escalation_levels), judged at every write; "
        "an order written before levels were recorded has none and reads as its derived level",
    )
    audit_seq: int = 0
    audit_head: str = "0" * 64
