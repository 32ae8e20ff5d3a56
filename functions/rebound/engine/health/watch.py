"""The retry-health report, run on its own every five minutes (by the sweeper's handler).

Why the sweeper and not a Lambda of its own on a schedule: the sweeper already runs every minute
with every right the report needs (the tables, the queues' attributes, the schedules), and the
local runtime already plays its schedule, so the report runs locally exactly as on AWS with no new
function, role, schedule or IAM to keep in step. A five-minute period is claimed with a control
record (``Sweeper.first_in_period``, the claim the manual recovery completion uses too), so it
runs once a period whichever sweep gets there; a report that fails is logged and counted as a
sweeper failure, and the sweep itself is unaffected.

Each run:
- takes ``expected_interval_minutes`` and ``stale_metadata_minutes`` from the environment's
  config (``Settings.health_*``, set by the stack from ``health:`` in ``config/environments``);
- publishes ``task.health.reports_total``, ``task.health.alerts_total`` (failing checks; the
  ``RetryHealthUnhealthy`` alarm), ``task.notification.retry_plans_total`` (failed deliveries with
  a plan to retry or wait) and ``task.notification.retryable_total`` (those to retry now);
- keeps one work order per failing check (finding kind), subject ``health#<check>``: opened (and
  notified) when the check fails and none is open, resolved by the system with the reason when
  the check no longer fails.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import timedelta

from rebound.domain.basics import Severity
from rebound.domain.work_order import Resolution, WorkOrder
from rebound.engine import telemetry as m
from rebound.engine.delivery_retries import Decision, DeliveryRetryRequest, planned_deliveries
from rebound.engine.deps import Deps
from rebound.engine.escalation import OPEN_STATES, Escalation, count_resolution, stage_resolution
from rebound.engine.health.checks import HEALTH_SUBJECT_PREFIX, HealthChecks
from rebound.engine.health.report import RetryHealthReport, Status, Thresholds

log = logging.getLogger(__name__)
ACTOR = "health"
SUBJECT_PREFIX = HEALTH_SUBJECT_PREFIX
HEALTH_RUNBOOK = "retry-health-unhealthy.md"
"""The page of a failing check's work order (``health#<check>``): it describes every check."""


@dataclass
class WatchReport:
    report: RetryHealthReport
    opened: list[str] = field(default_factory=list)
    resolved: list[str] = field(default_factory=list)


class HealthWatch:
    def __init__(self, deps: Deps) -> None:
        self.deps = deps
        self.store = deps.store

    def thresholds(self) -> Thresholds:
        s = self.deps.settings
        return Thresholds(
            expected_interval=timedelta(minutes=s.health_expected_interval_minutes),
            stale_metadata=timedelta(minutes=s.health_stale_metadata_minutes),
        )

    def run(self) -> WatchReport:
        report = HealthChecks(self.deps).report(self.thresholds(), generated_by="sweeper")
        failing = [c for c in report.checks if c.status is Status.FAIL]
        metrics = self.deps.metrics
        metrics.count(m.HEALTH_REPORTS)
        metrics.count(m.HEALTH_ALERTS, len(failing))
        plan, _ = planned_deliveries(
            self.deps, DeliveryRetryRequest(generated_by="sweeper"), self.deps.clock.now()
        )
        retry, wait = plan.counts.get(Decision.RETRY, 0), plan.counts.get(Decision.WAIT, 0)
        metrics.count(m.DELIVERY_RETRY_PLANS, retry + wait)
        metrics.count(m.RETRYABLE_DELIVERIES, retry)
        watch = WatchReport(report)
        open_orders = {
            o.subject: o
            for state in OPEN_STATES
            for o in self.store.work_orders(state)
            if o.subject.startswith(SUBJECT_PREFIX)
        }
        for check in report.checks:
            subject = f"{SUBJECT_PREFIX}{check.name}"
            order = open_orders.get(subject)
            try:
                if check.status is Status.FAIL and order is None:
                    watch.opened.append(self._open(subject, check.name, check.summary))
                elif check.status is not Status.FAIL and order is not None:
                    self._resolve(order, f"{check.name} is {check.status.value} again: {check.summary}")
                    watch.resolved.append(order.work_order_id)
            except Exception:  # one finding's work order must not stop the others
                log.exception("health work order not updated", extra={"check": check.name})
                metrics.count(m.SWEEPER_FAILURE)
        if failing:
            log.warning(
                "retry health is unhealthy",
                extra={"failing": [c.name for c in failing], "work_orders_opened": watch.opened},
            )
        return watch

    def _open(self, subject: str, check: str, summary: str) -> str:
        order = Escalation(self.deps, ACTOR).open_by_hand(
            subject,
            {
                "severity": Severity.HIGH.value,
                "reason": f"health_{check}: {summary}"[:500],
                "opened_by": ACTOR,
            },
            runbook=HEALTH_RUNBOOK,
        )
        return order.work_order_id

    def _resolve(self, order: WorkOrder, reason: str) -> None:
        uow = self.store.unit_of_work(ACTOR, self.deps.clock.now())
        saved = stage_resolution(
            uow,
            order,
            resolution=Resolution.FIXED,
            by=ACTOR,
            reason=reason,
            evidence={"finding": order.subject},
        )
        uow.commit()
        count_resolution(self.deps.metrics, saved)
