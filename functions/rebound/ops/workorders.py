"""Work orders for operators: list, show, acknowledge, resolve.

A work order moves ``open -> acknowledged -> resolved`` (``open -> resolved`` too); each change is
one transaction with its audit record, the operator as actor. Resolving checks the resolution
against the run: ``replayed`` needs a run that was replayed (or has moved on since), and ``skipped``
or ``cancelled`` are what ``rebound runs skip|cancel`` record themselves, resolving the work order
in the same transaction.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from rebound.domain.approvals import RESOLVE, ApprovalRequest, approval_evidence
from rebound.domain.audit import ChainCheck, verify_chain
from rebound.domain.audit_record import AuditRecord
from rebound.domain.basics import Severity
from rebound.domain.errors import Conflict, RunNotFound, TaskNotFound, ValidationFailed, WorkOrderNotFound
from rebound.domain.escalation_levels import level_of
from rebound.domain.ids import run_subject, task_subject, work_order_subject
from rebound.domain.run import Run, RunState
from rebound.domain.tenancy import ALL_TENANTS
from rebound.domain.timefmt import iso
from rebound.domain.work_order import Resolution, WorkOrder, WorkOrderState
from rebound.engine.deps import Deps
from rebound.engine.escalation import Escalation, count_resolution, stage_resolution
from rebound.engine.ports import UnitOfWork
from rebound.ops.approvals import Approvals
from rebound.ops.common import when

_NEXT: dict[WorkOrderState, frozenset[WorkOrderState]] = {
    WorkOrderState.OPEN: frozenset({WorkOrderState.ACKNOWLEDGED, WorkOrderState.RESOLVED}),
    WorkOrderState.ACKNOWLEDGED: frozenset({WorkOrderState.RESOLVED}),
    WorkOrderState.RESOLVED: frozenset(),
}


def work_order_view(order: WorkOrder, now: datetime | None = None) -> dict[str, Any]:
    """What operators see of an order. Its escalation level as recorded; with ``now``, an order
    written before levels were recorded reads as its level derived at ``now``."""
    return {
        "work_order_id": order.work_order_id,
        "state": order.state.value,
        "severity": order.severity.value,
        "level": level_of(order, now) if now is not None else order.level,
        "subject": order.subject,
        "run_id": order.run_id,
        "task_id": order.task_id,
        "tenant": order.tenant,
        "reason": order.reason,
        "error_code": order.error_code,
        "attempts": order.attempts,
        "opened_at": iso(order.opened_at),
        "acknowledged_at": when(order.acknowledged_at),
        "acknowledged_by": order.acknowledged_by,
        "resolved_at": when(order.resolved_at),
        "resolved_by": order.resolved_by,
        "resolution": order.resolution.value if order.resolution else None,
        "runbook_url": order.runbook_url,
        "notified": {d.channel: d.status.value for d in order.deliveries},
        "resolve_notified": {d.channel: d.status.value for d in order.resolve_deliveries},
        "resolve_reason": order.resolve_reason,
        "occurrences": 1 + len(order.occurrences),
    }


@dataclass(frozen=True)
class WorkOrderDetail:
    order: WorkOrder
    trail: list[AuditRecord]
    chain: ChainCheck
    run: Run | None
    now: datetime | None = None
    """When it was read: an order without a recorded level shows its level derived then."""

    def as_dict(self) -> dict[str, Any]:
        return {
            **work_order_view(self.order, self.now),
            "note": self.order.note,
            "deliveries": [d.model_dump(mode="json") for d in self.order.deliveries],
            "run_state": self.run.state.value if self.run else None,
            "audit": [
                {
                    "seq": r.seq,
                    "at": iso(r.at),
                    "actor": r.actor,
                    "action": r.action,
                    "from_state": r.from_state,
                    "to_state": r.to_state,
                    "evidence": r.evidence,
                }
                for r in self.trail
            ],
            "audit_verified": self.chain.ok,
        }


class WorkOrderOps:
    def __init__(self, deps: Deps, actor: str, approval: ApprovalRequest | None = None) -> None:
        self.deps = deps
        self.store = deps.store
        self.actor = actor
        self.approval = approval
        """The approved request this resolution carries out (``rebound.ops.approvals``)."""

    def get(self, work_order_id: str) -> WorkOrder:
        order = self.store.get_work_order(work_order_id)
        if order is None:
            raise WorkOrderNotFound.of(work_order_id)
        return order

    def find(
        self,
        *,
        state: WorkOrderState | None = None,
        task_id: str | None = None,
        severity: Severity | None = None,
        level: int | None = None,
    ) -> list[WorkOrder]:
        """Work orders, oldest first; ``level`` compares each order's level as it reads
        (``level_of``: recorded, else derived now)."""
        now = self.deps.clock.now()
        return [
            o
            for o in self.store.work_orders(state)
            if (task_id is None or o.task_id == task_id)
            and (severity is None or o.severity is severity)
            and (level is None or level_of(o, now) == level)
        ]

    def show(self, work_order_id: str) -> WorkOrderDetail:
        order = self.get(work_order_id)
        subject = work_order_subject(work_order_id)
        trail = self.store.audit_trail(subject)
        run = self.store.get_run(order.run_id) if order.run_id else None
        check = verify_chain(subject, trail, self.store.audit_keys.check)
        return WorkOrderDetail(order, trail, check, run, self.deps.clock.now())

    def create(
        self,
        *,
        severity: Severity,
        reason: str,
        run_id: str | None = None,
        task_id: str | None = None,
    ) -> WorkOrder:
        """Open a work order by hand about a run, a task, or (with neither) the environment."""
        tenant = None
        if run_id is not None:
            run = self.deps.store.get_run(run_id)
            if run is None:
                raise RunNotFound.of(run_id)
            subject, task_id, tenant = run_subject(run_id), run.task_id, run.tenant
        elif task_id is not None:
            stored = self.deps.store.get_task(task_id)
            if stored is None:
                raise TaskNotFound.of(task_id)
            subject, tenant = task_subject(task_id), stored.task.tenant
        else:
            subject = f"env#{self.deps.settings.environment}"
        detail = {
            "run_id": run_id,
            "task_id": task_id,
            "tenant": tenant,
            "severity": severity.value,
            "reason": reason,
            "opened_by": self.actor,
        }
        return Escalation(self.deps, self.actor).open_by_hand(subject, detail)

    def ack(self, work_order_id: str, note: str = "") -> tuple[WorkOrder, bool]:
        """Acknowledge. Returns the work order and whether this call changed it."""
        order = self.get(work_order_id)
        if order.state is WorkOrderState.ACKNOWLEDGED:
            return order, False
        now = self.deps.clock.now()
        after = order.model_copy(
            update={
                "state": WorkOrderState.ACKNOWLEDGED,
                "acknowledged_at": now,
                "acknowledged_by": self.actor,
                "note": note or order.note,
            }
        )
        return self._save(order, after, "acknowledged", {"note": note or None}), True

    def resolve(self, work_order_id: str, resolution: Resolution, note: str = "") -> WorkOrder:
        order = self.get(work_order_id)
        run = self.store.get_run(order.run_id) if order.run_id else None
        if run is not None:
            self._check_resolution(order, run, resolution)
        if WorkOrderState.RESOLVED not in _NEXT[order.state]:
            raise Conflict(
                f"work order {order.work_order_id} is {order.state.value}; it cannot become resolved",
                work_order_id=order.work_order_id,
                state=order.state.value,
            )
        rules = self.deps.settings.approval_rules()
        if self.approval is None and order.severity is Severity.CRITICAL and rules.critical_runs:
            Approvals(self.deps, self.actor).gate(
                RESOLVE,
                order.tenant or ALL_TENANTS,
                work_order_subject(order.work_order_id),
                {"work_order_id": order.work_order_id, "resolution": resolution.value, "note": note},
                note or f"resolve as {resolution.value}",
            )
        uow: UnitOfWork = self.store.unit_of_work(self.actor, self.deps.clock.now())
        saved = stage_resolution(
            uow,
            order,
            resolution=resolution,
            by=self.actor,
            reason=note or f"resolved by {self.actor} ({resolution.value})",
            evidence={
                "note": note or None,
                "run_state": run.state.value if run else None,
                **approval_evidence(self.approval),
            },
            note=note or None,
        )
        self._commit(uow, order)
        count_resolution(self.deps.metrics, saved)
        return saved

    @staticmethod
    def _check_resolution(order: WorkOrder, run: Run, resolution: Resolution) -> None:
        if resolution is Resolution.REPLAYED and run.state is RunState.DEAD_LETTERED:
            raise ValidationFailed(
                f"run {run.run_id} is still dead_lettered; replay it first "
                f"(rebound runs retry {run.run_id}, or rebound dlq redrive)",
                key_path="resolution",
            )
        if resolution is Resolution.SUPERSEDED and run.state is not RunState.SUPERSEDED:
            raise ValidationFailed(
                f"run {run.run_id} is {run.state.value}, not superseded; only a workstream that runs "
                "its step again supersedes a run (and resolves its work order itself)",
                key_path="resolution",
            )
        wanted = {Resolution.SKIPPED: RunState.SKIPPED, Resolution.CANCELLED: RunState.CANCELLED}.get(
            resolution
        )
        if wanted is not None and run.state is not wanted:
            verb = "skip" if wanted is RunState.SKIPPED else "cancel"
            raise ValidationFailed(
                f"run {run.run_id} is {run.state.value}, not {wanted.value}; "
                f"use `rebound runs {verb} {run.run_id} --reason ...`, which resolves {order.work_order_id}",
                key_path="resolution",
            )

    def _save(self, before: WorkOrder, after: WorkOrder, action: str, evidence: dict[str, Any]) -> WorkOrder:
        if after.state not in _NEXT[before.state]:
            raise Conflict(
                f"work order {before.work_order_id} is {before.state.value}; it cannot become "
                f"{after.state.value}",
                work_order_id=before.work_order_id,
                state=before.state.value,
            )
        uow: UnitOfWork = self.store.unit_of_work(self.actor, self.deps.clock.now())
        saved = uow.save_work_order(before, after, action=action, evidence=evidence)
        self._commit(uow, before)
        return saved

    @staticmethod
    def _commit(uow: UnitOfWork, before: WorkOrder) -> None:
        try:
            uow.commit()
        except Conflict as exc:
            raise Conflict(
                f"work order {before.work_order_id} changed meanwhile; look at it again",
                work_order_id=before.work_order_id,
            ) from exc
