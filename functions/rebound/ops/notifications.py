"""Failed work-order notifications: a plan that decides, per failed delivery, ``retry``, ``wait`` or
``suppress`` with its reason, and carrying the plan out.

Escalation notifies every configured channel (SNS, PagerDuty, Slack) when it opens a work order,
records each attempt on the work order (``WorkOrder.deliveries``) and retries a failed channel
while its event is redelivered (5 receives, then the control DLQ). What is still failed after that
is for an operator: ``plan`` shows what ``rebound.engine.delivery_retries`` decides for each failed
delivery (``retry``, ``wait`` or ``suppress``, with its reason), changing nothing.

``execute`` computes the plan again (a plan is never taken from the caller) and sends each
``retry`` through the escalation's own delivery code (``Escalation.deliver``): every attempt is
recorded on the work order, and audited on its chain as ``notification-retried`` with the caller
as actor and ``generated_by`` in the evidence. A channel that fails again stays ``failed``, with
one more attempt.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from rebound.domain.work_order import DeliveryStatus, WorkOrder
from rebound.engine.delivery_retries import (
    Decision,
    DeliveryRetryPlan,
    DeliveryRetryPolicy,
    DeliveryRetryRequest,
    PlannedDelivery,
    planned_deliveries,
)
from rebound.engine.deps import Deps
from rebound.engine.escalation import Escalation
from rebound.ops.common import validated

__all__ = [
    "RETRIED",
    "Decision",
    "DeliveryRetryPlan",
    "DeliveryRetryPolicy",
    "DeliveryRetryRequest",
    "DeliveryRetryResult",
    "NotificationOps",
    "PlannedDelivery",
    "RetriedDelivery",
]

RETRIED = "notification-retried"
"""The audit action of an operator's delivery retry on the work order's chain."""


class RetriedDelivery(BaseModel):
    """The attempt a retry made: ``delivered`` or ``failed`` (again), with the channel's answer."""

    work_order_id: str
    channel: str
    status: DeliveryStatus
    attempts: int
    detail: str
    recorded: bool = Field(description="false when the work order changed meanwhile; look again")


class DeliveryRetryResult(BaseModel):
    plan: DeliveryRetryPlan
    retried: list[RetriedDelivery]
    delivered: int
    failed: int


class NotificationOps:
    def __init__(self, deps: Deps, actor: str) -> None:
        self.deps = deps
        self.store = deps.store
        self.actor = actor

    def plan(self, request: DeliveryRetryRequest | dict[str, Any] | None = None) -> DeliveryRetryPlan:
        """Decide ``retry``, ``wait`` or ``suppress`` for each failed delivery. Changes nothing."""
        req = validated(DeliveryRetryRequest, request or {})
        return planned_deliveries(self.deps, req, self.deps.clock.now())[0]

    def execute(self, request: DeliveryRetryRequest | dict[str, Any] | None = None) -> DeliveryRetryResult:
        """Plan again, and retry what the plan says to retry, audited on each work order's chain."""
        req = validated(DeliveryRetryRequest, request or {})
        plan, planned = planned_deliveries(self.deps, req, self.deps.clock.now())
        channels: dict[str, list[str]] = {}
        orders: dict[str, WorkOrder] = {}
        for p in planned:
            if p.item.decision is Decision.RETRY:
                channels.setdefault(p.order.work_order_id, []).append(p.item.channel)
                orders[p.order.work_order_id] = p.order
        escalation = Escalation(self.deps, self.actor)
        retried: list[RetriedDelivery] = []
        for order_id, names in channels.items():
            reasons = {p.item.channel: p.item.reason for p in planned if p.order.work_order_id == order_id}
            outcome = escalation.deliver(
                orders[order_id],
                names,
                action=RETRIED,
                evidence={
                    "generated_by": req.generated_by,
                    "retry_policy": req.retry_policy.model_dump(mode="json"),
                    "reasons": {name: reasons[name] for name in names},
                },
            )
            retried += [
                RetriedDelivery(
                    work_order_id=order_id,
                    channel=d.channel,
                    status=d.status,
                    attempts=d.attempts,
                    detail=d.detail,
                    recorded=outcome.recorded,
                )
                for d in outcome.attempts
            ]
        failed = sum(1 for r in retried if r.status is DeliveryStatus.FAILED)
        return DeliveryRetryResult(plan=plan, retried=retried, delivered=len(retried) - failed, failed=failed)
