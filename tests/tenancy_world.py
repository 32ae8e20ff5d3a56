"""Tenants' things side by side, for the tenancy tests: of each tenant, any mix of tasks,
dead-lettered runs (each with its DLQ message and its work order), work orders opened by hand, a
workstream with a run, and a redrive job; and the identities that ask about them.

``build(deps)`` makes one of everything for tenant ``acme`` (A), as the generated tests use it;
``build_tenant`` makes any ``Mix`` of one tenant, as the property test draws them. ``World`` is the
one thing of each kind a request names; ``Things.secrets`` are every identifier of a tenant: none of
them may appear in what another tenant's caller is answered, beyond the ones that caller sent.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from rebound.domain.approvals import SKIP, ApprovalRequired
from rebound.domain.basics import Severity
from rebound.domain.workstreams import ResourceSpec, Workstream
from rebound.engine.deps import Deps
from rebound.engine.escalation import Escalation
from rebound.ops.approvals import Approvals
from rebound.ops.dlq import DlqFilter, DlqOps
from rebound.ops.dlq.jobs import RedriveJobs
from rebound.ops.workorders import WorkOrderOps
from rebound.ops.workstreams import WorkstreamOps
from support import dead_letters, outbox_events, register, task

ACCOUNT = "123456789012"
BOB = f"arn:aws:iam::{ACCOUNT}:user/bob"
"""A caller of tenant globex only (B)."""
NOBODY = f"arn:aws:iam::{ACCOUNT}:user/nobody"
"""A caller of no tenant."""
ROOT = f"arn:aws:iam::{ACCOUNT}:user/root-admin"
"""An administrator (``*``)."""
IDENTITIES = {BOB: ["globex"], ROOT: ["*"]}

TENANT = "acme"
RESOURCE = "shared-warehouse"


@dataclass(frozen=True)
class Mix:
    """What one tenant has: ``dead[i]`` dead-lettered runs of its task ``i``, and optionally a
    work order by hand about its first task, a workstream over its tasks (started once), and a
    redrive job over its DLQ messages."""

    dead: tuple[int, ...] = (1,)
    order_by_hand: bool = True
    workstream: bool = True
    job: bool = True


EVERYTHING = Mix()


@dataclass
class Things:
    """Every identifier of one tenant's things, by kind."""

    tenant: str
    tasks: list[str] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)
    work_orders: list[str] = field(default_factory=list)
    workstreams: list[str] = field(default_factory=list)
    workstream_runs: list[str] = field(default_factory=list)
    jobs: list[str] = field(default_factory=list)
    approvals: list[str] = field(default_factory=list)

    @property
    def secrets(self) -> list[str]:
        """What another tenant's caller must never be shown (beyond what it sent)."""
        return [
            self.tenant,
            *self.tasks,
            *self.runs,
            *self.messages,
            *self.work_orders,
            *self.workstreams,
            *self.workstream_runs,
            *self.jobs,
            *self.approvals,
        ]


@dataclass
class World:
    """One thing of each kind of one tenant, as a request names it (``None``: it has none, and
    the request names an id in its namespace that is no thing)."""

    things: Things
    task_id: str
    run_id: str | None
    message_id: str | None
    work_order_id: str | None
    workstream_id: str | None
    workstream_run_id: str | None
    job_id: str | None
    approval_id: str | None
    document: dict[str, Any]

    @property
    def tenant(self) -> str:
        return self.things.tenant

    @property
    def secrets(self) -> list[str]:
        return self.things.secrets


class _Nowhere:
    """A redrive job's continuation that continues nothing (the job stays as it started)."""

    def __call__(self, job_id: str) -> None:
        return None


REQUESTER = "arn:aws:iam::123456789012:user/requester"
"""Who asked for the world's approval request (not the administrator, who may approve it)."""


def escalate_dead_letters(deps: Deps, run_ids: list[str]) -> None:
    """What the escalation handler does with each run's ``task.dead_lettered`` event: its work
    order (from the outbox: the in-memory store's events, or the outbox table's)."""
    events = getattr(deps.store, "events", None)
    emitted = [(e.detail_type, e.detail) for e in events] if events is not None else outbox_events(deps)
    for kind, detail in emitted:
        if kind == "task.dead_lettered" and detail.get("run_id") in run_ids:
            Escalation(deps).on_dead_lettered(detail)


def build_tenant(deps: Deps, tenant: str, mix: Mix) -> Things:
    """``mix`` of ``tenant``'s things in ``deps``, made by an administrator and the engine."""
    things = Things(tenant)
    names = [f"invoice-export-{i}" for i in range(len(mix.dead))] or ["invoice-export-0"]
    things.tasks = [f"{tenant}.{name}" for name in names]
    register(deps, *(task(key, tenant=tenant) for key in things.tasks))
    for key, count in zip(things.tasks, mix.dead, strict=False):
        if count:
            runs = dead_letters(deps, count, key)
            escalate_dead_letters(deps, runs)
            things.runs += runs
    for run_id in things.runs:
        run = deps.store.get_run(run_id)
        assert run is not None and run.dlq_message_id is not None and run.work_order_id is not None
        things.messages.append(run.dlq_message_id)
        things.work_orders.append(run.work_order_id)
    if mix.order_by_hand:
        order = WorkOrderOps(deps, ROOT).create(
            severity=Severity.LOW, reason="a note", task_id=things.tasks[0]
        )
        things.work_orders.append(order.work_order_id)
    if mix.workstream:
        steps = [f"{tenant}.extract", f"{tenant}.load"]
        register(deps, *(task(key, tenant=tenant, schedule=None) for key in steps))
        things.tasks += steps
        workstream = Workstream.model_validate(
            {
                "id": f"{tenant}-ledger",
                "tenant": tenant,
                "steps": [
                    {"task": "extract", "task_key": steps[0]},
                    {"task": "load", "task_key": steps[1], "needs": ["extract"], "resources": [RESOURCE]},
                ],
            }
        )
        ops = WorkstreamOps(deps, ROOT)
        ops.register([workstream], [ResourceSpec(id=RESOURCE, max_holders=1)])
        things.workstreams.append(workstream.id)
        things.workstream_runs.append(ops.run(workstream.id, token=f"{tenant}-world").run_id)
    if things.runs:  # a request for a second operator, about one of its runs
        try:
            Approvals(deps, REQUESTER).gate(
                SKIP,
                tenant,
                f"run#{things.runs[0]}",
                {"run_id": things.runs[0], "reason": "a note"},
                "a note",
            )
        except ApprovalRequired as held:
            things.approvals.append(held.request.request_id)
    if mix.job:
        job = RedriveJobs(DlqOps(deps, ROOT, wait_s=0), _Nowhere()).start(DlqFilter(tenant=tenant))
        things.jobs.append(job.job_id)
    return things


def world_of(things: Things, pick: int = 0) -> World:
    """The ``pick``-th thing of each kind (wrapping round), or ``None`` where there is none."""

    def one(ids: list[str]) -> str | None:
        return ids[pick % len(ids)] if ids else None

    short = things.tasks[0].partition(".")[2]
    return World(
        things=things,
        task_id=things.tasks[pick % len(things.tasks)],
        run_id=one(things.runs),
        message_id=one(things.messages),
        work_order_id=one(things.work_orders),
        workstream_id=one(things.workstreams),
        workstream_run_id=one(things.workstream_runs),
        job_id=one(things.jobs),
        approval_id=one(things.approvals),
        document={"tasks": [{"id": short, "tenant": things.tenant, "target": {"type": "sim"}}]},
    )


def build(deps: Deps) -> World:
    """One of everything of acme in ``deps`` (whose settings get ``IDENTITIES``)."""
    deps.settings = deps.settings.model_copy(update={"identities": IDENTITIES})
    return world_of(build_tenant(deps, TENANT, EVERYTHING))


def items_of(deps: Deps, things: Things) -> str:
    """Everything of a tenant the store holds but its audit trails, as one text to compare before
    and after: a refusal writes only to the ``tenant#<tenant>`` chain."""
    store = deps.store
    keys = [f"ws#def#{w}" for w in things.workstreams]
    keys += [f"ws#run#{r}" for r in things.workstream_runs]
    keys += [f"redrive-job#{j}" for j in things.jobs]
    items: dict[str, Any] = {
        "tasks": sorted(
            s.task.model_dump_json() for s in store.list_tasks() if s.task.tenant == things.tenant
        ),
        "runs": sorted(
            r.model_dump_json() for key in things.tasks for r in store.runs_for_task(key, limit=100)
        ),
        "orders": sorted(o.model_dump_json() for o in store.work_orders() if o.tenant == things.tenant),
        "dlq": [repr(store.get_dlq_entry(m)) for m in things.messages],
        "records": [store.get_key(key) for key in keys],
    }
    return json.dumps(items, sort_keys=True, default=str)


def acme_items(deps: Deps, world: World) -> str:
    return items_of(deps, world.things)
