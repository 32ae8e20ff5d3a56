"""What a notification says about a work order, whatever the channel: that it was opened, and
(once it is) that it was resolved."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rebound.domain.timefmt import iso
from rebound.domain.work_order import WorkOrder


@dataclass(frozen=True)
class Notification:
    """A dead-lettered run's work order, as every channel tells it."""

    order: WorkOrder
    environment: str

    @property
    def subject(self) -> str:
        o = self.order
        what = o.task_id or "unparseable message"
        head = f"[Rebound {self.environment}] {o.severity.value.upper()}{self._level}"
        text = f"{head}: {what} dead-lettered ({o.reason})"
        return text[:100]

    @property
    def _level(self) -> str:
        return f" L{self.order.level}" if self.order.level is not None else ""

    @property
    def summary(self) -> str:
        """A one-line summary without the subject's 100-character limit."""
        o = self.order
        what = o.task_id or "unparseable message"
        error = f", {o.error_code}" if o.error_code else ""
        return (
            f"[Rebound {self.environment}] {o.severity.value.upper()}{self._level}: {what} dead-lettered "
            f"({o.reason}{error}) after {o.attempts} attempt{'s' if o.attempts != 1 else ''}"
        )

    def body(self) -> dict[str, Any]:
        o = self.order
        return {
            "work_order_id": o.work_order_id,
            "environment": self.environment,
            "severity": o.severity.value,
            "level": o.level,
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

    @property
    def resolved_subject(self) -> str:
        o = self.order
        text = f"[Rebound {self.environment}] RESOLVED: {o.task_id or o.subject} ({self.resolution})"
        return text[:100]

    @property
    def resolution(self) -> str:
        return self.order.resolution.value if self.order.resolution else "resolved"

    @property
    def resolved_summary(self) -> str:
        o = self.order
        why = f": {o.resolve_reason or o.note}" if (o.resolve_reason or o.note) else ""
        return (
            f"[Rebound {self.environment}] RESOLVED {o.work_order_id} ({o.task_id or o.subject}), "
            f"{self.resolution} by {o.resolved_by or 'rebound'}{why}"
        )

    def resolved_body(self) -> dict[str, Any]:
        o = self.order
        return {
            **self.body(),
            "state": "resolved",
            "resolution": self.resolution,
            "resolved_by": o.resolved_by,
            "resolved_at": iso(o.resolved_at) if o.resolved_at else None,
            "reason": o.resolve_reason or o.note,
            "occurrences": 1 + len(o.occurrences),
        }


SLA_BREACH_ALERT = "sla-breach"
"""The kind of alert an SLA breach is (``Notifier.alert_each``): the SLA-breach webhook takes only these."""
