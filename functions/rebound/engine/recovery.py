"""Manual recovery completion: of the work orders opened in the last 7 days, the share resolved.

The sweeper publishes it every five minutes (``workorder.completion_rate``, a percentage; nothing
when no work order was opened in the window, so an idle environment does not alarm), and
``rebound slo`` reads the same figure. The alarm ``ManualRecoveryCompletion`` fires below 95 %.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from rebound.domain.work_order import WorkOrderState
from rebound.engine import telemetry as m
from rebound.engine.ports import Metrics, Store

WINDOW = timedelta(days=7)
TARGET_PERCENT = 95.0


@dataclass(frozen=True)
class Completion:
    opened: int
    resolved: int
    since: datetime

    @property
    def rate(self) -> float | None:
        """Resolved ÷ opened, in percent; None when nothing was opened."""
        return round(100.0 * self.resolved / self.opened, 2) if self.opened else None


def completion(store: Store, now: datetime, window: timedelta = WINDOW) -> Completion:
    since = now - window
    counts = {state: len(store.work_orders(state, opened_since=since)) for state in WorkOrderState}
    return Completion(opened=sum(counts.values()), resolved=counts[WorkOrderState.RESOLVED], since=since)


def publish(store: Store, metrics: Metrics, now: datetime) -> Completion:
    figure = completion(store, now)
    if figure.rate is not None:
        metrics.observe(m.WORKORDER_COMPLETION_RATE, figure.rate, "Percent")
    return figure
