"""What a notification says about a dead-lettered run's work order, whatever the channel."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rebound.domain.models import WorkOrder
from rebound.domain.timefmt import iso


@dataclass(frozen=True)
class Notification:
    """A dead-lettered run's work order, as every channel tells it."""

    order: WorkOrder
    environment: str

    @property
    def subject(self) -> str:
        o = self.order
        what = o.task_id or "unparseable message"
        text = f"[Rebound {self.environment}] {o.severity.value.upper()}: {what} dead-lettered ({o.reason})"
        return text[:100]

    @property
    def summary(self) -> str:
        """A one-line summary without the subject's 100-character limit."""
        o = self.order
        what = o.task_id or "unparseable message"
        error = f", {o.error_code}" if o.error_code else ""
        return (
            f"[Rebound {self.environment}] {o.severity.value.upper()}: {what} dead-lettered "
            f"({o.reason}{error}) after {o.attempts} attempt{'s' if o.attempts != 1 else ''}"
        )

    def body(self) -> dict[str, Any]:
        o = self.order
        return {
            "work_order_id": o.work_order_id,
            "environment": self.environment,
            "severity": o.severity.value,
            "run_id": o.run_id,
            "task_id": o.task_id,
            "tenant": o.tenant,
            "reason": o.reason,
            "error_code": o.error_code,
            "attempts": o.attempts,
            "runbook_url": o.runbook_url,
            "opened_at": iso(o.opened_at),
            "next_step": f"rebound workorders show {o.work_order_id}",
        }
