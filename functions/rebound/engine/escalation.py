"""Open exactly one work order per dead-lettered subject, and notify until every channel delivered.

The work order's id is a function of the subject (``run#...`` or ``msg#...``) and it is written
with a conditional put, so duplicate or concurrent deliveries of ``task.dead_lettered`` open one
work order. Each notification attempt is recorded on the work order; a failed channel makes the
event be redelivered, and only channels that have not delivered are tried again. ``deliver`` is
that one round of attempts, for named channels: the operators' delivery retries use it too.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rebound.domain import events as ev
from rebound.domain.errors import Conflict, OperationalError, ReboundError
from rebound.domain.ids import RUN_PREFIX, work_order_id, work_order_subject
from rebound.domain.models import Delivery, DeliveryStatus, Severity, WorkOrder
from rebound.domain.notification import Notification
from rebound.domain.timefmt import iso, parse_utc
from rebound.engine import crashpoints as cp
from rebound.engine import sla
from rebound.engine import telemetry as m
from rebound.engine.dead_letters import DeadLetters
from rebound.engine.deps import Deps
from rebound.engine.ports import DeliveryFailed

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DeliveryOutcome:
    """What one round of deliveries did: the work order after it, each attempt, the channels that
    failed, and whether the attempts were recorded (false when the work order changed meanwhile)."""

    order: WorkOrder
    attempts: list[Delivery]
    failed: list[str]
    recorded: bool


class Escalation:
    def __init__(self, deps: Deps, actor: str = "escalation") -> None:
        self.deps = deps
        self.store = deps.store
        self.clock = deps.clock
        self.actor = actor

    def on_dead_lettered(self, detail: dict[str, Any]) -> WorkOrder:
        """Open the work order, make sure the dead letter has its DLQ message, then notify.

        Every dead letter reaches this handler through the outbox, so this is where a DLQ message
        the dead-lettering invocation did not live to send is sent after all."""
        subject = str(detail["subject"])
        order_id = work_order_id(subject, str(detail.get("dead_lettered_at") or ""))
        order = self.store.get_work_order(order_id)
        if order is None:
            try:
                order = self._open(order_id, detail)
            except ReboundError as exc:
                self.deps.metrics.count(m.WORKORDER_FAILURE)
                log.error(
                    "work order could not be created",
                    extra={"subject": subject, "work_order_id": order_id, "error": exc.message},
                )
                raise
            self.deps.faults.reached(cp.AFTER_WORK_ORDER_COMMIT)
        if subject.startswith(RUN_PREFIX) and detail.get("run_id") and not detail.get("message_id"):
            DeadLetters(self.deps, self.actor).ensure_in_dlq(
                str(detail["run_id"]), str(detail.get("dead_lettered_at") or "") or None
            )
        return self.notify(order)

    def open_by_hand(self, subject: str, detail: dict[str, Any]) -> WorkOrder:
        """An operator opens a work order (about a run, a task, or anything else): a new order
        each time, notified like any other."""
        order_id = work_order_id(subject, iso(self.clock.now()))
        return self.notify(self._open(order_id, {**detail, "subject": subject}, link_run=False))

    def on_sla_breached(self, detail: dict[str, Any]) -> str:
        """Notify every breach; the third consecutive breaching run opens a work order."""
        task_id = str(detail["task_id"])
        kind = str(detail["kind"])
        self.deps.notifier.alert(
            f"[Rebound {self.deps.settings.environment}] SLA breached: {task_id} ({kind})",
            {
                **detail,
                "environment": self.deps.settings.environment,
                "next_step": f"rebound runs show {detail['run_id']}",
            },
            "warning",
        )
        counter = self.store.get_key(sla.counter_key(task_id)) or {}
        consecutive = int(counter.get("consecutive", 0))
        if consecutive < sla.WORK_ORDER_AFTER:
            return f"notified ({consecutive} in a row)"
        subject = f"sla#{task_id}#{int(counter.get('streak', 0))}"
        order_id = work_order_id(subject)
        order = self.store.get_work_order(order_id) or self._open(
            order_id,
            {
                "subject": subject,
                "run_id": detail["run_id"],
                "task_id": task_id,
                "tenant": detail.get("tenant"),
                "reason": f"sla_breached_{sla.WORK_ORDER_AFTER}_times_in_a_row",
                "error_code": f"SLA_{kind.upper()}",
                "attempts": detail.get("attempt", 0),
            },
            link_run=False,
        )
        self.notify(order)
        return order.work_order_id

    def on_workstream_failed(self, detail: dict[str, Any]) -> str:
        """A workstream failed (or a dependency cycle stopped it): one critical work order per
        workstream run, its evidence the decision tree's answers (``workstream.failed``)."""
        subject = f"workstream#{detail['run_id']}#failed"  # not the run's own chain: the order has its own
        order_id = work_order_id(subject)
        evidence = {k: v for k, v in detail.items() if k not in ("event_id", "at")}
        reason = "dependency_cycle_detected" if "cycle" in detail else "workstream_failed"
        order = self.store.get_work_order(order_id) or self._open(
            order_id,
            {
                "subject": subject,
                "task_id": None,
                "tenant": detail.get("tenant"),
                "severity": "critical",
                "reason": reason,
                "error_code": reason.upper(),
                "evidence": evidence,
            },
            link_run=False,
        )
        self.notify(order)
        return order.work_order_id

    def on_resource_exhausted(self, detail: dict[str, Any]) -> str:
        """A step has waited longer than its workstream allows for a resource: alert (no work order)."""
        held = ", ".join(detail["resources"])
        self.deps.notifier.alert(
            f"[Rebound {self.deps.settings.environment}] resource exhausted: {held} "
            f"(workstream {detail['workstream_id']}, step {detail['step']})",
            {**detail, "environment": self.deps.settings.environment},
            "warning",
        )
        return "notified"

    def _open(self, order_id: str, detail: dict[str, Any], link_run: bool = True) -> WorkOrder:
        for _ in range(3):
            existing = self.store.get_work_order(order_id)
            if existing is not None:
                return existing
            now = self.clock.now()
            run = self.store.get_run(detail["run_id"]) if detail.get("run_id") else None
            policy = (
                self.deps.policies.of_task(run.task_id) if run else self.deps.policies.for_stored(None)
            ).policy
            order = WorkOrder(
                work_order_id=order_id,
                subject=str(detail["subject"]),
                run_id=detail.get("run_id"),
                task_id=detail.get("task_id"),
                tenant=detail.get("tenant"),
                severity=Severity(detail.get("severity") or policy.severity.value),
                reason=str(detail.get("reason") or "dead_lettered"),
                error_code=detail.get("error_code"),
                attempts=int(detail.get("attempts") or 0),
                runbook_url=policy.runbook_url
                or f"{self.deps.settings.runbook_base_url}/dead-lettered-run.md",
                message_id=detail.get("message_id"),
                opened_at=now,
            )
            uow = self.store.unit_of_work(self.actor, now)
            saved = uow.save_work_order(
                None,
                order,
                action="opened",
                evidence={
                    "subject": order.subject,
                    "reason": order.reason,
                    "dead_lettered_at": detail.get("dead_lettered_at"),
                    "event_id": detail.get("event_id"),
                    **(detail.get("evidence") or {}),
                },
            )
            if link_run and run is not None and run.work_order_id != order_id:
                uow.save_run(
                    run,
                    run.model_copy(update={"work_order_id": order_id}),
                    action="work-order-opened",
                    evidence={"work_order_id": order_id, "severity": order.severity.value},
                )
            elif run is None or not link_run:
                uow.append_audit(
                    order.subject, action="work-order-opened", evidence={"work_order_id": order_id}
                )
            uow.emit(ev.workorder_created(saved), work_order_subject(order_id))
            try:
                uow.commit()
            except Conflict:
                continue
            self.deps.metrics.count(m.WORKORDER_OPENED)
            self.deps.metrics.count(m.RETRY_ESCALATED)
            lag = (
                (now - parse_utc(detail["dead_lettered_at"])).total_seconds()
                if detail.get("dead_lettered_at")
                else 0
            )
            log.warning(
                "work order opened",
                extra={
                    "work_order_id": order_id,
                    "subject": order.subject,
                    "severity": order.severity.value,
                    "seconds_after_dead_letter": round(lag, 3),
                },
            )
            return saved
        raise OperationalError(
            f"could not open work order {order_id}: the run kept changing", subject=detail["subject"]
        )

    def notify(self, order: WorkOrder) -> WorkOrder:
        """Deliver to every channel that has not delivered yet; raise if any still fails."""
        delivered = {d.channel for d in order.deliveries if d.status is DeliveryStatus.DELIVERED}
        pending = [c.name for c in self.deps.notifier.channels if c.name not in delivered]
        if not pending:
            return order
        outcome = self.deliver(order, pending)
        if outcome.failed:
            raise OperationalError(
                f"notification failed for {', '.join(outcome.failed)}; will retry",
                work_order_id=order.work_order_id,
                channels=outcome.failed,
            )
        return outcome.order

    def deliver(
        self,
        order: WorkOrder,
        channels: Sequence[str],
        *,
        action: str = "notified",
        evidence: Mapping[str, Any] | None = None,
    ) -> DeliveryOutcome:
        """Send ``order``'s notification through the named channels, once each, and record every
        attempt on the work order, audited as ``action`` (with ``evidence`` added) by this actor.

        A channel that is not configured here, or has delivered already, is left alone. Nothing
        raises for a channel that fails: it is in ``failed`` and recorded as such."""
        delivered = {d.channel for d in order.deliveries if d.status is DeliveryStatus.DELIVERED}
        wanted = [c for c in self.deps.notifier.channels if c.name in channels and c.name not in delivered]
        if not wanted:
            return DeliveryOutcome(order, [], [], recorded=False)
        note = Notification(order, self.deps.settings.environment)
        tries = {d.channel: d.attempts for d in order.deliveries}
        new: list[Delivery] = []
        for channel in wanted:
            now = self.clock.now()
            try:
                status, detail = DeliveryStatus.DELIVERED, channel.send(note)
            except DeliveryFailed as exc:
                status, detail = DeliveryStatus.FAILED, exc.detail
            new.append(
                Delivery(
                    channel=channel.name,
                    status=status,
                    at=now,
                    attempts=tries.get(channel.name, 0) + 1,
                    detail=detail,
                )
            )
        kept = [d for d in order.deliveries if d.channel not in {n.channel for n in new}]
        after = order.model_copy(update={"deliveries": kept + new})
        uow = self.store.unit_of_work(self.actor, self.clock.now())
        saved = uow.save_work_order(
            order,
            after,
            action=action,
            evidence={
                **(evidence or {}),
                **{
                    d.channel: {"status": d.status.value, "attempt": d.attempts, "detail": d.detail}
                    for d in new
                },
            },
        )
        recorded = True
        try:
            uow.commit()
        except Conflict:
            saved, recorded = self.store.get_work_order(order.work_order_id) or order, False
        failed = [d.channel for d in new if d.status is DeliveryStatus.FAILED]
        if failed:
            self.deps.metrics.count(m.NOTIFICATION_FAILURE, len(failed))
        return DeliveryOutcome(saved, new, failed, recorded)
