"""Concurrency slots: overlap per task, mutual-exclusion groups, per-tenant quotas.

A slot is an item in the idempotency table holding the set of runs inside it (``holders``) and
its capacity. A run enters its slots in the same transaction that claims its attempt
(``ADD holders :run`` if the set has room or already holds the run) and leaves them in the same
transaction that records the attempt's outcome (``DELETE holders :run``), or when its lease
expires, or when it is cancelled. So a slot can never outlive the state that justified it, and
entering or leaving twice changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rebound.adapters.dynamo import UnitOfWork
from rebound.domain.models import OverlapPolicy, Task, TenantSettings

SLOT_PREFIX = "slots#"


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


def enter(uow: UnitOfWork, slot: Slot, run_id: str) -> None:
    uow.update(
        "idempotency",
        {"pk": slot.key},
        "ADD holders :run SET cap = :cap",
        slot.label,
        condition="attribute_not_exists(holders) OR size(holders) < :cap OR contains(holders, :id)",
        values={":run": {run_id}, ":cap": slot.cap, ":id": run_id},
    )


def leave(uow: UnitOfWork, key: str, run_id: str) -> None:
    uow.update("idempotency", {"pk": key}, "DELETE holders :run", f"leave {key}", values={":run": {run_id}})


def holders(item: dict[str, Any] | None) -> list[str]:
    return sorted(item.get("holders", [])) if item else []


def busy_slots(failed_labels: list[str], slots: list[Slot]) -> list[Slot]:
    """Which of ``slots`` made a claim transaction fail."""
    return [s for s in slots if s.label in failed_labels]
