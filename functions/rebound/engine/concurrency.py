"""Concurrency slots: overlap per task, mutual-exclusion groups, per-tenant quotas.

A slot is a control record holding the set of runs inside it (``holders``) and
its capacity. A run enters its slots in the same transaction that claims its attempt
(``ADD holders :run`` if the set has room or already holds the run) and leaves them in the same
transaction that ends its stay: the attempt's outcome, its lease expiring, a cancel or skip (by
an operator or by policy), a dead letter. So a slot can never outlive the state that justified
it, and entering or leaving twice changes nothing.

Each holder also carries an expiry (an attribute ``exp:<run id>``, epoch seconds): its lease's
end plus a grace period for a running run, the end of its longest wait for a run waiting in a
buffer. A claim that finds a slot full of holders past their expiry removes them (a conditional
write, so only what is really expired goes) and tries again. Nothing normally expires: it is the
backstop for a holder whose leaving was lost.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from rebound.domain.errors import Conflict
from rebound.domain.ids import slot_expiry_attribute, slot_subject
from rebound.domain.schedule_spec import OverlapPolicy
from rebound.domain.task import Task, TenantSettings
from rebound.engine.ports import Store, UnitOfWork

SLOT_PREFIX = "slots#"
SLOT_GRACE = timedelta(minutes=10)
"""A holder expires this long after its lease: the sweeper fails an expired lease (and leaves its
slots) long before."""


@dataclass(frozen=True)
class Slot:
    kind: str  # task | mutex | tenant | buffer
    name: str
    cap: int

    @property
    def key(self) -> str:
        return f"{SLOT_PREFIX}{self.kind}#{self.name}"

    @property
    def label(self) -> str:
        return f"slot {self.kind}#{self.name}"


def slots_for(task: Task, tenant: TenantSettings | None) -> list[Slot]:
    """The slots a run of ``task`` must hold while it runs."""
    slots: list[Slot] = []
    if task.overlap is not OverlapPolicy.ALLOW_ALL:
        slots.append(Slot("task", task.id, 1))
    if task.mutex_group:
        slots.append(Slot("mutex", task.mutex_group, 1))
    if tenant is not None and tenant.max_concurrent_runs:
        slots.append(Slot("tenant", task.tenant, tenant.max_concurrent_runs))
    return slots


def buffer_slot(task: Task) -> Slot:
    """The one place a ``buffer_one`` task keeps a run waiting for the running one."""
    return Slot("buffer", task.id, 1)


def enter(uow: UnitOfWork, slot: Slot, run_id: str, until: datetime) -> None:
    """Stage entering ``slot`` until ``until`` (lease end or longest wait); fails if it is full."""
    uow.enter_slot(slot.key, slot.cap, run_id, until, slot.label)


def leave(uow: UnitOfWork, key: str, run_id: str) -> None:
    uow.leave_slot(key, run_id)


def holders(item: dict[str, Any] | None) -> list[str]:
    return sorted(item.get("holders", [])) if item else []


def expired_holders(item: dict[str, Any] | None, now: datetime) -> list[str]:
    """Holders whose expiry has passed (holders entered before expiries existed never expire)."""
    if not item:
        return []
    stamp = now.timestamp()
    return [
        run_id
        for run_id in holders(item)
        if isinstance(item.get(slot_expiry_attribute(run_id)), int | float)
        and float(item[slot_expiry_attribute(run_id)]) < stamp
    ]


def reap(store: Store, key: str, run_id: str, now: datetime, actor: str) -> bool:
    """Remove an expired holder from a slot, audited on the slot's own chain (``slot#...``). False
    if it was not expired any more or was gone already."""
    uow = store.unit_of_work(actor, now)
    uow.reap_slot_holder(key, run_id, now)
    uow.append_audit(
        slot_subject(key.removeprefix(SLOT_PREFIX)), action="holder-expired", evidence={"run_id": run_id}
    )
    try:
        uow.commit()
    except Conflict:
        return False
    return True


def busy_slots(failed_labels: list[str], slots: list[Slot]) -> list[Slot]:
    """Which of ``slots`` made a claim transaction fail."""
    return [s for s in slots if s.label in failed_labels]
