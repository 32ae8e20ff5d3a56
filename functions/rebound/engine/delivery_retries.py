"""Failed work-order notifications and the plan that decides, per failed delivery, ``retry``,
``wait`` or ``suppress`` with its reason (``plan_deliveries``). Changes nothing: carrying a plan
out is an operator's action (``rebound.ops.notifications``); the sweeper's health report counts
what the plan would retry (``rebound.engine.health.watch``).

The decisions, in this order:

- ``suppress`` when the work order is resolved (nobody needs telling) or acknowledged (someone is
  on it), when the channel is no longer configured here, or when the delivery has had
  ``max_retry_attempts`` retries already (every attempt after the first counts, escalation's
  included);
- ``wait`` while the backoff since the last attempt has not passed, with ``retry_at``: the wait
  after a delivery's first attempt is ``retry_delay_minutes``, and it grows by
  ``backoff_multiplier`` with each retry (``retry_delay_minutes * backoff_multiplier ** retries``).
  With ``allow_immediate_retry``, a delivery that failed on its first attempt only is retried at
  once;
- ``retry`` otherwise.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from rebound.domain.basics import Severity
from rebound.domain.errors import WorkOrderNotFound
from rebound.domain.timefmt import UtcDatetime, iso
from rebound.domain.work_order import Delivery, DeliveryStatus, WorkOrder, WorkOrderState
from rebound.engine.deps import Deps


class DeliveryRetryPolicy(BaseModel):
    """How failed deliveries are retried. Every field has a default."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_retry_attempts: int = Field(
        default=10,
        ge=0,
        le=100,
        description="retries a delivery may have after its first attempt (escalation's own count); "
        "past them it is suppressed",
    )
    retry_delay_minutes: float = Field(
        default=5.0, ge=0, le=1440, description="wait after a delivery's first attempt before retrying it"
    )
    allow_immediate_retry: bool = Field(
        default=False, description="retry a delivery that failed on its first attempt at once"
    )
    backoff_multiplier: float = Field(
        default=2.0, ge=1.0, le=10.0, description="the wait grows by this factor with each retry"
    )

    def wait_after(self, attempts: int) -> timedelta:
        """The wait after a delivery's ``attempts``-th attempt before the next one."""
        retries = max(attempts - 1, 0)
        if retries == 0 and self.allow_immediate_retry:
            return timedelta(0)
        return timedelta(minutes=self.retry_delay_minutes * self.backoff_multiplier**retries)


class DeliveryRetryRequest(BaseModel):
    """What ``POST /notifications/retry-plan`` (and ``.../execute``) take as their body."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    generated_by: str | None = Field(
        default=None,
        max_length=256,
        description="who or what asked; echoed in the plan and in the audit record of a retry",
    )
    retry_policy: DeliveryRetryPolicy = Field(default_factory=DeliveryRetryPolicy)
    work_order_id: str | None = Field(
        default=None,
        min_length=1,
        description="only this work order, in any state (otherwise every open and acknowledged one)",
    )
    channel: str | None = Field(
        default=None, min_length=1, description="only this channel (sns, pagerduty, slack)"
    )


class Decision(StrEnum):
    RETRY = "retry"
    WAIT = "wait"
    SUPPRESS = "suppress"


class PlannedDelivery(BaseModel):
    """One failed delivery and what to do about it."""

    work_order_id: str
    work_order_state: WorkOrderState
    severity: Severity
    channel: str
    decision: Decision
    reason: str
    attempts: int
    last_attempt_at: UtcDatetime
    last_detail: str
    retry_at: UtcDatetime | None = Field(default=None, description="when a `wait` may be retried")


class DeliveryRetryPlan(BaseModel):
    environment: str
    generated_at: UtcDatetime
    generated_by: str | None = None
    retry_policy: DeliveryRetryPolicy
    counts: dict[Decision, int]
    deliveries: list[PlannedDelivery]


@dataclass(frozen=True)
class Planned:
    """A planned delivery with the work order it belongs to."""

    order: WorkOrder
    item: PlannedDelivery


def _minutes(delta: timedelta) -> str:
    minutes = delta.total_seconds() / 60
    return f"{minutes:g}m" if minutes < 120 else f"{minutes / 60:g}h"


def planned_deliveries(
    deps: Deps, req: DeliveryRetryRequest, now: datetime
) -> tuple[DeliveryRetryPlan, list[Planned]]:
    """The plan for ``req`` at ``now``, and each planned delivery with its work order."""
    configured = set(deps.notifier.names)
    planned = [
        Planned(order, _planned(order, d, req.retry_policy, configured, now))
        for order in _orders(deps, req.work_order_id)
        for d in order.deliveries
        if d.status is DeliveryStatus.FAILED and (req.channel is None or d.channel == req.channel)
    ]
    counts = Counter(p.item.decision for p in planned)
    plan = DeliveryRetryPlan(
        environment=deps.settings.environment,
        generated_at=now,
        generated_by=req.generated_by,
        retry_policy=req.retry_policy,
        counts={d: counts.get(d, 0) for d in Decision},
        deliveries=[p.item for p in planned],
    )
    return plan, planned


def _orders(deps: Deps, work_order_id: str | None) -> list[WorkOrder]:
    if work_order_id is not None:
        order = deps.store.get_work_order(work_order_id)
        if order is None:
            raise WorkOrderNotFound.of(work_order_id)
        return [order]
    return deps.store.work_orders(WorkOrderState.OPEN) + deps.store.work_orders(WorkOrderState.ACKNOWLEDGED)


def _planned(
    order: WorkOrder, d: Delivery, policy: DeliveryRetryPolicy, configured: set[str], now: datetime
) -> PlannedDelivery:
    decision, reason, retry_at = _decision(order, d, policy, configured, now)
    return PlannedDelivery(
        work_order_id=order.work_order_id,
        work_order_state=order.state,
        severity=order.severity,
        channel=d.channel,
        decision=decision,
        reason=reason,
        attempts=d.attempts,
        last_attempt_at=d.at,
        last_detail=d.detail,
        retry_at=retry_at,
    )


def _decision(
    order: WorkOrder, d: Delivery, policy: DeliveryRetryPolicy, configured: set[str], now: datetime
) -> tuple[Decision, str, datetime | None]:
    """The decision for one failed delivery, its reason, and when a ``wait`` ends."""
    if order.state is WorkOrderState.RESOLVED:
        by = f" by {order.resolved_by}" if order.resolved_by else ""
        at = f" at {iso(order.resolved_at)}" if order.resolved_at else ""
        return Decision.SUPPRESS, f"the work order was resolved{by}{at}: nobody needs telling", None
    if order.state is WorkOrderState.ACKNOWLEDGED:
        by = f" by {order.acknowledged_by}" if order.acknowledged_by else ""
        at = f" at {iso(order.acknowledged_at)}" if order.acknowledged_at else ""
        return Decision.SUPPRESS, f"the work order was acknowledged{by}{at}: someone is on it", None
    if d.channel not in configured:
        return Decision.SUPPRESS, f"channel {d.channel!r} is not configured in this environment", None
    retries = max(d.attempts - 1, 0)
    if retries >= policy.max_retry_attempts:
        return (
            Decision.SUPPRESS,
            f"{retries} retries after the first attempt already; max_retry_attempts is "
            f"{policy.max_retry_attempts}",
            None,
        )
    wait = policy.wait_after(d.attempts)
    due = d.at + wait
    last = f"failed {d.attempts} time(s), the last at {iso(d.at)} ({d.detail or 'no detail'})"
    if now < due:
        return (
            Decision.WAIT,
            f"{last}; backoff: retry {retries + 1} is due {_minutes(wait)} after it, at {iso(due)}",
            due,
        )
    if retries == 0 and policy.allow_immediate_retry:
        return Decision.RETRY, f"{last}; a first failure is retried at once (allow_immediate_retry)", None
    return Decision.RETRY, f"{last}; the {_minutes(wait)} backoff has passed", None
