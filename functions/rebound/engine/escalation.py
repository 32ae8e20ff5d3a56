"""Open exactly one work order per dead-lettered subject, notify until every channel delivered,
and close the loop: resolve it when its run recovers, and tell every channel.

The work order's id is a function of the subject (``run#...`` or ``msg#...``) and it is written
with a conditional put, so duplicate or concurrent deliveries of ``task.dead_lettered`` open one
work order. A run dead-lettered again while its work order is still open (a flapping run) adds an
occurrence to that order instead of opening a second. Each notification attempt is recorded on the
work order; a failed channel makes the event be redelivered, and only channels that have not
delivered are tried again. ``deliver`` is that one round of attempts, for named channels: the
operators' delivery retries use it too.

Resolving goes through the outbox like everything else: ``task.recovered`` (written with the
run's success) makes ``on_recovered`` resolve the order, audited with this system actor and the
reason; every resolution, by the system or an operator, writes ``workorder.resolved`` in its own
transaction (``stage_resolution``), and ``on_resolved`` sends the resolved notice on each channel
the opening reached, recorded on the order (``resolve_deliveries``) and retried the same way.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from rebound.domain import events as ev
from rebound.domain.basics import Severity
from rebound.domain.errors import Conflict, OperationalError, ReboundError
from rebound.domain.ids import RUN_PREFIX, work_order_id, work_order_subject
from rebound.domain.notification import SLA_BREACH_ALERT, Notification
from rebound.domain.run import Run, RunState
from rebound.domain.timefmt import iso, parse_utc
from rebound.domain.work_order import Delivery, DeliveryStatus, Resolution, WorkOrder, WorkOrderState
from rebound.engine import crashpoints as cp
from rebound.engine import sla
from rebound.engine import telemetry as m
from rebound.engine.dead_letters import DeadLetters
from rebound.engine.deps import Deps
from rebound.engine.ports import Channel, DeliveryFailed, Metrics, Store, UnitOfWork

DEAD_LETTER_RUNBOOK = "dead-lettered-run.md"
"""The page of a dead-lettered run's work order when its policy names none."""
BY_HAND_RUNBOOK = "work-order-by-hand.md"
"""The page of a work order an operator opened by hand about a task or the environment."""
log = logging.getLogger(__name__)

ALERT_RECORD_TTL = timedelta(days=14)
"""How long the record of which channels delivered an SLA breach is kept (the event's retries end sooner)."""

OPEN_STATES = frozenset({WorkOrderState.OPEN, WorkOrderState.ACKNOWLEDGED})


def stage_resolution(
    uow: UnitOfWork,
    order: WorkOrder,
    *,
    resolution: Resolution,
    by: str,
    reason: str,
    evidence: Mapping[str, Any] | None = None,
    note: str | None = None,
) -> WorkOrder:
    """Resolve ``order`` in ``uow``: its audit record (``resolved``, with the reason) and
    ``workorder.resolved`` (which sends the resolved notices) in the same transaction."""
    now = uow.at
    resolved = order.model_copy(
        update={
            "state": WorkOrderState.RESOLVED,
            "resolution": resolution,
            "resolved_at": now,
            "resolved_by": by,
            "resolve_reason": reason,
            "note": note or order.note,
        }
    )
    saved = uow.save_work_order(
        order,
        resolved,
        action="resolved",
        evidence={"resolution": resolution.value, "reason": reason, **(evidence or {})},
    )
    uow.emit(ev.workorder_resolved(saved), work_order_subject(order.work_order_id))
    return saved


CLOSING_RESOLUTION = {
    RunState.SKIPPED: Resolution.SKIPPED,
    RunState.CANCELLED: Resolution.CANCELLED,
    RunState.SUPERSEDED: Resolution.SUPERSEDED,
}
"""How a run's open work order is resolved when the run is closed without succeeding."""


def stage_closing_resolution(
    uow: UnitOfWork, store: Store, run: Run, state: RunState, *, by: str, reason: str, via: str
) -> WorkOrder | None:
    """Resolve the open work order of ``run``, which ``uow`` closes as ``state`` (skipped,
    cancelled or superseded), in that same transaction: by whoever closes it (an operator, or
    Rebound's own overlap and workstream paths), with their reason. Nothing when the run has no
    open order."""
    order = store.get_work_order(run.work_order_id) if run.work_order_id else None
    if order is None or order.state is WorkOrderState.RESOLVED:
        return None
    action = state.value
    return stage_resolution(
        uow,
        order,
        resolution=CLOSING_RESOLUTION[state],
        by=by,
        reason=f"run {run.run_id} {action} by {by}: {reason}",
        evidence={"note": reason, "via": via},
        note=reason,
    )


def count_resolution(metrics: Metrics, order: WorkOrder) -> None:
    """``workorder.resolved_total`` and the time it took, once a resolution committed."""
    metrics.count(m.WORKORDER_RESOLVED)
    if order.resolved_at is not None:
        took = max(0.0, (order.resolved_at - order.opened_at).total_seconds())
        metrics.observe(m.WORKORDER_TIME_TO_RESOLVE, took, "Seconds")


@dataclass(frozen=True)
class DeliveryOutcome:
    """What one round of deliveries did: the work order after it, each attempt, the channels that
    failed, and whether the attempts were recorded (false when the work order changed meanwhile)."""

    order: WorkOrder
    attempts: list[Delivery]
    failed: list[str]
    recorded: bool

    def settled(self, what: str) -> WorkOrder:
        """The work order, once every channel delivered; raises (the event is redelivered) if not."""
        if self.failed:
            raise OperationalError(
                f"{what} failed for {', '.join(self.failed)}; will retry",
                work_order_id=self.order.work_order_id,
                channels=self.failed,
            )
        return self.order


class _Superseded(Exception):
    """The dead-lettered run was superseded before its work order was opened."""

    def __init__(self, extra: dict[str, Any]) -> None:
        super().__init__(extra)
        self.extra = extra


class Escalation:
    def __init__(self, deps: Deps, actor: str = "escalation") -> None:
        self.deps = deps
        self.store = deps.store
        self.clock = deps.clock
        self.actor = actor

    def on_dead_lettered(self, detail: dict[str, Any]) -> WorkOrder | None:
        """Open the work order, make sure the dead letter has its DLQ message, then notify.

        Every dead letter reaches this handler through the outbox, so this is where a DLQ message
        the dead-lettering invocation did not live to send is sent after all. A run superseded
        before its event arrived (a workstream ran its step again meanwhile) gets neither: nobody
        is paged for work another run has taken over, and its DLQ message, if any, is removed by
        the sweeper (``None``)."""
        subject = str(detail["subject"])
        order_id = work_order_id(subject, str(detail.get("dead_lettered_at") or ""))
        order = self.store.get_work_order(order_id)
        flapping = self._open_order_of_run(detail) if order is None else None
        if flapping is not None:
            order = self._add_occurrence(flapping, detail)
        elif order is None:
            try:
                order = self._open(order_id, detail)
            except _Superseded as superseded:
                log.info("dead letter superseded before its work order: none opened", extra=superseded.extra)
                return None
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

    def _open_order_of_run(self, detail: Mapping[str, Any]) -> WorkOrder | None:
        """The work order still open for this dead letter's run, if it has one."""
        run = self.store.get_run(str(detail["run_id"])) if detail.get("run_id") else None
        if run is None or not run.work_order_id:
            return None
        order = self.store.get_work_order(run.work_order_id)
        return order if order is not None and order.state in OPEN_STATES else None

    def _add_occurrence(self, order: WorkOrder, detail: Mapping[str, Any]) -> WorkOrder:
        """Record another dead letter of the order's run on it (once per dead letter)."""
        at = str(detail.get("dead_lettered_at") or "")
        for _ in range(3):
            if at in order.occurrences or order.state not in OPEN_STATES:
                return order
            after = order.model_copy(
                update={
                    "occurrences": [*order.occurrences, at],
                    "attempts": int(detail.get("attempts") or order.attempts),
                    "error_code": detail.get("error_code") or order.error_code,
                }
            )
            uow = self.store.unit_of_work(self.actor, self.clock.now())
            saved = uow.save_work_order(
                order,
                after,
                action="occurred-again",
                evidence={
                    "dead_lettered_at": at,
                    "reason": detail.get("reason"),
                    "error_code": detail.get("error_code"),
                    "occurrence": 1 + len(after.occurrences),
                    "event_id": detail.get("event_id"),
                },
            )
            try:
                uow.commit()
            except Conflict:
                order = self.store.get_work_order(order.work_order_id) or order
                continue
            log.warning(
                "flapping run: occurrence added to its open work order",
                extra={"work_order_id": order.work_order_id, "occurrence": 1 + len(after.occurrences)},
            )
            return saved
        raise OperationalError(
            f"could not add an occurrence to work order {order.work_order_id}: it kept changing",
            work_order_id=order.work_order_id,
        )

    def on_recovered(self, detail: dict[str, Any]) -> str:
        """The run of a work order succeeded: resolve the order, audited with the reason, unless
        it is resolved already (by an operator, or an earlier delivery of this event)."""
        order_id = str(detail["work_order_id"])
        for _ in range(3):
            order = self.store.get_work_order(order_id)
            if order is None or order.state not in OPEN_STATES:
                return f"{order_id}: nothing to resolve"
            run = self.store.get_run(str(detail["run_id"]))
            if run is None or run.state is not RunState.SUCCEEDED:
                return f"{order_id}: run {detail['run_id']} is not succeeded"
            retried = run.attempt - 1
            reason = (
                f"run {run.run_id} succeeded on attempt {run.attempt} "
                f"after {retried} failed attempt{'s' if retried != 1 else ''} (retry, redrive or replay)"
            )
            uow = self.store.unit_of_work(self.actor, self.clock.now())
            saved = stage_resolution(
                uow,
                order,
                resolution=Resolution.REPLAYED,
                by=self.actor,
                reason=reason,
                evidence={
                    "run_state": run.state.value,
                    "attempt": run.attempt,
                    "event_id": detail.get("event_id"),
                },
            )
            try:
                uow.commit()
            except Conflict:
                continue
            count_resolution(self.deps.metrics, saved)
            log.info("work order resolved itself", extra={"work_order_id": order_id, "reason": reason})
            return f"{order_id}: resolved"
        raise OperationalError(
            f"could not resolve work order {order_id}: it kept changing", work_order_id=order_id
        )

    def on_resolved(self, detail: dict[str, Any]) -> WorkOrder | None:
        """Send the resolved notice on every channel that carried the opening and has not had it
        yet; raise if one still fails (the event is redelivered, and only those are tried)."""
        order = self.store.get_work_order(str(detail["work_order_id"]))
        if order is None or order.state is not WorkOrderState.RESOLVED:
            return order
        opened = {d.channel for d in order.deliveries if d.status is DeliveryStatus.DELIVERED}
        told = {d.channel for d in order.resolve_deliveries if d.status is DeliveryStatus.DELIVERED}
        wanted = [c for c in self.deps.notifier.channels if c.name in opened and c.name not in told]
        if not wanted:
            return order
        refs = {d.channel: d.ref for d in order.deliveries}
        outcome = self._round(
            order,
            wanted,
            lambda channel, note: channel.resolve(note, refs.get(channel.name)),
            field="resolve_deliveries",
            action="resolution-notified",
        )
        return outcome.settled("resolved notice")

    def open_by_hand(self, subject: str, detail: dict[str, Any], runbook: str | None = None) -> WorkOrder:
        """An operator (or the health watch) opens a work order about a run, a task, or anything
        else: a new order each time, notified like any other. Its runbook is ``runbook`` (a page
        of the runbooks), else its run's policy's, else the page for orders opened by hand."""
        order_id = work_order_id(subject, iso(self.clock.now()))
        if runbook is None and not detail.get("run_id"):
            runbook = BY_HAND_RUNBOOK
        if runbook is not None:
            detail = {**detail, "runbook_url": f"{self.deps.settings.runbook_base_url}/{runbook}"}
        return self.notify(self._open(order_id, {**detail, "subject": subject}, link_run=False))

    def on_sla_breached(self, detail: dict[str, Any]) -> str:
        """Notify every breach through each channel that takes SLA breaches; the third consecutive
        breaching run opens a work order. The channels that delivered a breach are recorded
        (``alert#sla#<run>#<kind>``, expiring with the control records), so a delivery of the same
        event again (one channel failed and the event is retried) tries only the others."""
        task_id = str(detail["task_id"])
        kind = str(detail["kind"])
        key = f"alert#sla#{detail['run_id']}#{kind}"
        record = self.store.get_key(key) or {}
        delivered: dict[str, str] = dict(record.get("delivered") or {})
        sent, failed = self.deps.notifier.alert_each(
            f"[Rebound {self.deps.settings.environment}] SLA breached: {task_id} ({kind})",
            {
                **detail,
                "environment": self.deps.settings.environment,
                "next_step": f"rebound runs show {detail['run_id']}",
            },
            "warning",
            kind=SLA_BREACH_ALERT,
            done=delivered,
        )
        if sent:
            expires = int((self.clock.now() + ALERT_RECORD_TTL).timestamp())
            self.store.put_key(key, {"delivered": {**delivered, **sent}, "expires_at": expires})
        if failed:
            channel, why = next(iter(failed.items()))
            log.warning("SLA breach not delivered", extra={"run_id": detail["run_id"], "failed": failed})
            raise DeliveryFailed(
                channel, f"{why} (retried with the event; delivered: {sorted(delivered | sent)})"
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
            if link_run and run is not None and run.state is RunState.SUPERSEDED:
                raise _Superseded({"run_id": run.run_id, "superseded_by": run.superseded_by})
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
                runbook_url=detail.get("runbook_url")
                or policy.runbook_url
                or f"{self.deps.settings.runbook_base_url}/{DEAD_LETTER_RUNBOOK}",
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
            if link_run:  # a dead letter: the retry loop gave up and escalated (not an SLA,
                # workstream, health or by-hand order)
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
        """Deliver to every channel that has not delivered yet; raise if any still fails. A
        resolved order is not announced any more (its resolution went out instead)."""
        if order.state is WorkOrderState.RESOLVED:
            return order
        delivered = {d.channel for d in order.deliveries if d.status is DeliveryStatus.DELIVERED}
        pending = [c.name for c in self.deps.notifier.channels if c.name not in delivered]
        if not pending:
            return order
        outcome = self.deliver(order, pending)
        return outcome.settled("notification")

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
        return self._round(
            order, wanted, lambda channel, note: channel.send(note), action=action, evidence=evidence
        )

    def _round(
        self,
        order: WorkOrder,
        wanted: Sequence[Channel],
        call: Callable[[Channel, Notification], str],
        *,
        field: str = "deliveries",
        action: str,
        evidence: Mapping[str, Any] | None = None,
    ) -> DeliveryOutcome:
        """``call`` each channel once and record every attempt in the order's ``field`` (the
        opening's deliveries, or the resolved notices), audited as ``action``."""
        note = Notification(order, self.deps.settings.environment)
        before: list[Delivery] = getattr(order, field)
        tries = {d.channel: d.attempts for d in before}
        new: list[Delivery] = []
        for channel in wanted:
            now = self.clock.now()
            ref: str | None = None
            try:
                answer = call(channel, note)
                status, detail, ref = DeliveryStatus.DELIVERED, str(answer), getattr(answer, "ref", None)
            except DeliveryFailed as exc:
                status, detail = DeliveryStatus.FAILED, exc.detail
            new.append(
                Delivery(
                    channel=channel.name,
                    status=status,
                    at=now,
                    attempts=tries.get(channel.name, 0) + 1,
                    detail=detail,
                    ref=ref,
                )
            )
        kept = [d for d in before if d.channel not in {n.channel for n in new}]
        after = order.model_copy(update={field: kept + new})
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
