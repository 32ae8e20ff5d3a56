"""What an item's audit chain says it should be, and where the stored item differs (``rebound state``).

Each kind of item keeps its own chain, and each chain says a different amount about its item:

- a **run**'s records carry the fields each transition changed (``evidence.changes``), so the
  whole run rebuilds from them (``rebound.domain.audit.rebuild_run``), bookkeeping aside;
- a **work order**'s records carry them too, since the level of escalation was added
  (``work_order_changes``); a chain with an older record (written before) says only the state
  and the chain head;
- a **task**'s records carry the definition it was saved with, and its state;
- a **workstream run**'s records carry every step's state and the run's state.

What a chain says is compared field by field with the item (``Difference``), and the restored
item is the stored item with exactly those fields set as the chain says. A chain that does not
verify rebuilds nothing: the difference names the chain, and the item is left for a restore from
a backup (``docs/runbooks/restore.md``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rebound.domain.audit import ChainCheck, rebuild_run, trail_mismatches
from rebound.domain.audit_record import AuditRecord
from rebound.domain.run import Run
from rebound.domain.stored import StoredTask
from rebound.domain.task import Task
from rebound.domain.work_order import WorkOrder
from rebound.domain.workstream_runs import WorkstreamRun

CHAIN = "audit chain"
"""The ``field`` of a difference that is the chain itself (broken, or missing): not repairable."""
WORK_ORDER_CHAIN_FIELDS = ("audit_seq", "audit_head")


@dataclass(frozen=True)
class Difference:
    """One field of one item that is not what its audit chain says."""

    kind: str
    """``run``, ``workorder``, ``task`` or ``workstream``."""
    item: str
    """The item's id."""
    field: str
    stored: Any
    """The item's value (``None`` for an item that does not exist)."""
    chain: Any
    """What the chain says (for ``CHAIN``, why nothing can be rebuilt)."""
    repairable: bool = True

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "item": self.item,
            "field": self.field,
            "stored": self.stored,
            "chain": self.chain,
            "repairable": self.repairable,
        }


def _unrepairable(kind: str, item: str, why: str) -> list[Difference]:
    return [Difference(kind, item, CHAIN, None, why, repairable=False)]


def chain_problem(kind: str, item: str, check: ChainCheck) -> list[Difference]:
    """The difference a chain that does not verify (or has no record) makes; none if it is fine."""
    if check.records == 0:
        return _unrepairable(kind, item, "no audit records: nothing to rebuild from")
    if not check.ok:
        return _unrepairable(kind, item, f"the chain does not verify: {check.detail}")
    return []


# ----------------------------------------------------------------------------------------- runs
def run_differences(run_id: str, stored: Run | None, records: list[AuditRecord]) -> list[Difference]:
    """Each field of the stored run that is not what its (verified) chain rebuilds; a run the chain
    has but the table does not is one difference, ``state``."""
    rebuilt = rebuild_run(run_id, records)
    if stored is None:
        return [Difference("run", run_id, "state", None, rebuilt.state.value)]
    chain = rebuilt.model_dump(mode="json")
    actual = stored.model_dump(mode="json")
    return [
        Difference("run", run_id, name, actual.get(name), chain.get(name))
        for name in trail_mismatches(stored, records)
    ]


def restored_run(
    run_id: str, stored: Run | None, differences: list[Difference], records: list[AuditRecord]
) -> Run:
    """The stored run with each differing field as the chain says (the rebuilt run if it is gone)."""
    rebuilt = rebuild_run(run_id, records)
    if stored is None:
        return rebuilt
    fields = {d.field: getattr(rebuilt, d.field) for d in differences if d.field != CHAIN}
    return Run.model_validate({**stored.model_dump(), **fields})


# ---------------------------------------------------------------------------------- work orders
def work_order_changes(before: WorkOrder | None, after: WorkOrder) -> dict[str, Any]:
    """The fields of ``after`` that differ from ``before`` (all of them for a new order): what a
    work order's audit record carries so that the order rebuilds from its chain."""
    new = after.model_dump(mode="json", exclude=set(WORK_ORDER_CHAIN_FIELDS))
    if before is None:
        return new
    old = before.model_dump(mode="json", exclude=set(WORK_ORDER_CHAIN_FIELDS))
    return {key: value for key, value in new.items() if old.get(key) != value}


def work_order_from_chain(records: list[AuditRecord]) -> dict[str, Any]:
    """The fields of a work order its chain says: all of them when every record carries its
    changes, else the state and the chain head (records written before they carried changes)."""
    ordered = sorted(records, key=lambda r: r.seq)
    said: dict[str, Any] = {}
    if ordered and all("changes" in r.evidence for r in ordered):
        for record in ordered:
            said.update(record.evidence["changes"])
    if ordered:
        if ordered[-1].to_state is not None:
            said["state"] = ordered[-1].to_state
        said["audit_seq"] = ordered[-1].seq
        said["audit_head"] = ordered[-1].hash
    return said


def work_order_differences(
    work_order_id: str, stored: WorkOrder, records: list[AuditRecord]
) -> list[Difference]:
    said = work_order_from_chain(records)
    actual = stored.model_dump(mode="json")
    if "opened_at" in said:  # a full rebuild: compare as the model normalizes values
        said = WorkOrder.model_validate({**actual, **said}).model_dump(mode="json")
    return [
        Difference("workorder", work_order_id, name, actual.get(name), said[name])
        for name in sorted(said)
        if actual.get(name) != said[name]
    ]


def restored_work_order(stored: WorkOrder, differences: list[Difference]) -> WorkOrder:
    fields = {d.field: d.chain for d in differences if d.field != CHAIN}
    return WorkOrder.model_validate({**stored.model_dump(mode="json"), **fields})


# ---------------------------------------------------------------------------------------- tasks
def task_from_chain(records: list[AuditRecord]) -> Task | None:
    """The definition the chain's last record with one says (with the state it moved to)."""
    for record in sorted(records, key=lambda r: r.seq, reverse=True):
        if "definition" in record.evidence:
            definition = dict(record.evidence["definition"])
            if record.to_state is not None:
                definition["state"] = record.to_state
            return Task.model_validate(definition)
    return None


def task_differences(stored: StoredTask, records: list[AuditRecord]) -> list[Difference]:
    task_id = stored.task.id
    said = task_from_chain(records)
    if said is None:
        return _unrepairable("task", task_id, "no record of the chain holds a definition")
    ordered = sorted(records, key=lambda r: r.seq)
    chain = said.model_dump(mode="json")
    actual = stored.task.model_dump(mode="json")
    found = [
        Difference("task", task_id, f"definition.{name}", actual.get(name), chain.get(name))
        for name in sorted(set(chain) | set(actual))
        if actual.get(name) != chain.get(name)
    ]
    head = {"audit_seq": ordered[-1].seq, "audit_head": ordered[-1].hash}
    found += [
        Difference("task", task_id, name, getattr(stored, name), value)
        for name, value in head.items()
        if getattr(stored, name) != value
    ]
    return found


# ------------------------------------------------------------------------------ workstream runs
def workstream_differences(run: WorkstreamRun, records: list[AuditRecord]) -> list[Difference]:
    """The run's state, each step's state and the chain head against the chain's last record."""
    last = max(records, key=lambda r: r.seq)
    found: list[Difference] = []
    if last.to_state is not None and run.state.value != last.to_state:
        found.append(Difference("workstream", run.run_id, "state", run.state.value, last.to_state))
    said_steps: dict[str, str] = dict(last.evidence.get("steps") or {})
    for step in run.steps:
        said = said_steps.get(step.step)
        if said is not None and step.state.value != said:
            found.append(
                Difference("workstream", run.run_id, f"steps.{step.step}.state", step.state.value, said)
            )
    for name, value in (("audit_seq", last.seq), ("audit_head", last.hash)):
        if getattr(run, name) != value:
            found.append(Difference("workstream", run.run_id, name, getattr(run, name), value))
    return found


def restored_workstream(run: WorkstreamRun, differences: list[Difference]) -> WorkstreamRun:
    data = run.model_dump(mode="json")
    by_step = {s["step"]: s for s in data["steps"]}
    for d in differences:
        if d.field.startswith("steps."):
            by_step[d.field.split(".")[1]]["state"] = d.chain
        elif d.field != CHAIN:
            data[d.field] = d.chain
    return WorkstreamRun.model_validate(data)
