"""Routes for recovery: the DLQ (list, show, its depth over time, redrive with filters, dry run,
limit and rate) and work orders (list, show, open by hand, acknowledge, resolve), including the
seeds' ``POST /ops/workorders``."""

from __future__ import annotations

import json
from typing import Annotated, Any

from aws_lambda_powertools.event_handler import Response, content_types
from aws_lambda_powertools.event_handler.openapi.params import Query
from pydantic import BaseModel, ConfigDict, Field

from rebound.api.app import Api
from rebound.domain.basics import Severity, TaskKey, Tenant
from rebound.domain.work_order import Resolution, WorkOrderState
from rebound.ops.authz import (
    Environment,
    FirstOf,
    JobOf,
    MessageOf,
    Rule,
    RunOf,
    TaskOf,
    TenantFilter,
    WorkOrderOf,
    rule,
)
from rebound.ops.common import parse_when
from rebound.ops.dlq import WINDOWS, DlqFilter, DlqOps
from rebound.ops.dlq.jobs import ASYNC_OVER, RedriveJobs
from rebound.ops.workorders import WorkOrderOps, work_order_view

MAX_PAGE = 500


class Filters(BaseModel):
    task_id: TaskKey | None = None
    tenant: Tenant | None = None
    error_code: str | None = Field(default=None, min_length=1, max_length=64)
    since: str | None = Field(default=None, description="arrived at or after: ISO 8601 or a duration ago")
    until: str | None = None


class Redrive(Filters):
    model_config = ConfigDict(populate_by_name=True)

    dry_run: bool = Field(default=False, description="count and classify, move nothing")
    limit: int | None = Field(default=None, ge=1, description="at most this many messages")
    rate: float | None = Field(default=None, gt=0, le=300, description="messages per second")
    as_job: bool = Field(
        default=False,
        alias="async",
        description=f"run it as a job (202 and a job id to poll); more than {ASYNC_OVER} matching "
        "messages always do",
    )


class NewWorkOrder(BaseModel):
    severity: Severity
    reason: str = Field(min_length=1, max_length=500)
    run_id: str | None = Field(default=None, min_length=1, max_length=200)
    task_id: TaskKey | None = None


class Ack(BaseModel):
    note: str = Field(default="", max_length=1000)


class Resolve(BaseModel):
    resolution: Resolution
    note: str = Field(default="", max_length=1000)


def _json(status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> Response[str]:
    kind = content_types.APPLICATION_JSON
    return Response(status_code=status, content_type=kind, body=json.dumps(body), headers=headers)


def _to_move(ops: DlqOps, wanted: DlqFilter, limit: int | None) -> int:
    """How many messages a redrive would take on (counted up to just past ``ASYNC_OVER``)."""
    matching = ops.count(wanted, at_most=ASYNC_OVER)
    return matching if limit is None else min(matching, limit)


def register(api: Api) -> None:
    def dlq_ops() -> DlqOps:
        return DlqOps(api.deps(), api.caller.actor, wait_s=0)

    def filters(f: Filters, ops: DlqOps) -> DlqFilter:
        now = ops.deps.clock.now()
        return DlqFilter(
            task_id=api.task_key(f.task_id),
            tenant=f.tenant,
            error_code=f.error_code,
            since=parse_when(f.since, now, option="since") if f.since else None,
            until=parse_when(f.until, now, option="until") if f.until else None,
        )

    @api.get(
        "/dlq",
        Rule("dlq:read", TenantFilter("tenant")),
        summary="Messages in the DLQ, oldest first, with their runs (from its record)",
    )
    def list_dlq(
        task_id: Annotated[str | None, Query()] = None,
        tenant: Annotated[str | None, Query()] = None,
        error_code: Annotated[str | None, Query()] = None,
        since: Annotated[str | None, Query()] = None,
        until: Annotated[str | None, Query()] = None,
        limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
        after: Annotated[str | None, Query(description="the cursor of the page before")] = None,
    ) -> dict[str, Any]:
        """Reading receives nothing from the queue, so it hides nothing from a redrive or another
        reader; ``next`` is the cursor of the next page (``null`` on the last)."""
        ops = dlq_ops()
        wanted = Filters(task_id=task_id, tenant=api.tenant, error_code=error_code, since=since, until=until)
        page = ops.find_page(filters(wanted, ops), limit=limit, after=after)
        depth = ops.depth()
        return {
            "depth": {"visible": depth.visible, "in_flight": depth.in_flight, "delayed": depth.delayed},
            "messages": [e.as_dict() for e in page.examined],
            "next": page.cursor,
        }

    @api.get(
        "/dlq/history",
        rule("dlq:read"),
        summary="The DLQ's depth over time, bucket by bucket, from its record",
    )
    def dlq_history(
        window: Annotated[str, Query(description=f"one of {', '.join(WINDOWS)}")] = "1h",
    ) -> dict[str, Any]:
        """The depth at the end of each bucket (a minute over ``1h``, a quarter of an hour over
        ``24h``), its peak, and what arrived and left in it: from the arrivals and departures the
        DLQ's record holds, so it covers the time before anyone looked. Nothing is received."""
        return dlq_ops().history(window).as_dict()  # counts, no tenant's messages

    @api.get(
        "/dlq/<message_id>",
        Rule("dlq:read", MessageOf("message_id")),
        summary="One DLQ (or archived) message with its reason and run",
    )
    def show_dlq(message_id: str) -> dict[str, Any]:
        return dlq_ops().show(message_id).as_dict()

    @api.post(
        "/dlq/redrive",
        Rule("dlq:redrive", TenantFilter("body.tenant")),
        summary="Redrive matching DLQ messages: each run replayed with a fresh budget",
        responses={
            200: {"description": "the redrive's report (done within the request)"},
            202: {"description": "a redrive job was started: poll GET /dlq/redrive-jobs/{job_id}"},
        },
    )
    def redrive(body: Redrive) -> Response[str]:
        """A dry run, and a redrive of at most ``ASYNC_OVER`` matching messages, answer with the
        report. A larger one (or ``async: true``) starts a job and answers 202 with it."""
        ops = dlq_ops()
        wanted = filters(body.model_copy(update={"tenant": api.tenant}), ops)
        if not body.dry_run and (body.as_job or _to_move(ops, wanted, body.limit) > ASYNC_OVER):
            job = RedriveJobs(ops, api.continuation).start(wanted, rate=body.rate, limit=body.limit)
            return _json(202, job.as_dict(), {"Location": f"/dlq/redrive-jobs/{job.job_id}"})
        report = ops.redrive(wanted, dry_run=body.dry_run, rate=body.rate, limit=body.limit)
        return _json(200, report.as_dict())

    @api.get(
        "/dlq/redrive-jobs/<job_id>",
        Rule("dlq:read", JobOf("job_id")),
        summary="A redrive job's progress: moved, failed, remaining and state",
    )
    def redrive_job(job_id: str) -> dict[str, Any]:
        return RedriveJobs(dlq_ops(), api.continuation).poll(job_id).as_dict()

    def orders() -> WorkOrderOps:
        return WorkOrderOps(api.deps(), api.caller.actor)

    def on_order(action: str) -> Rule:
        return Rule(action, WorkOrderOf("work_order_id"))

    @api.get("/workorders", rule("workorders:read"), summary="Work orders, oldest first")
    def list_orders(
        state: Annotated[WorkOrderState | None, Query()] = None,
        task_id: Annotated[str | None, Query()] = None,
        severity: Annotated[Severity | None, Query()] = None,
        level: Annotated[int | None, Query(ge=1, le=4, description="escalation level 1-4")] = None,
    ) -> list[dict[str, Any]]:
        ops = orders()
        now = ops.deps.clock.now()
        found = ops.find(state=state, task_id=api.task_key(task_id), severity=severity, level=level)
        return [work_order_view(o, now) for o in found if api.sees(o.tenant)]

    @api.get(
        "/workorders/<work_order_id>",
        on_order("workorders:read"),
        summary="A work order with its deliveries and audit trail",
    )
    def show_order(work_order_id: str) -> dict[str, Any]:
        return orders().show(work_order_id).as_dict()

    def create(body: NewWorkOrder) -> dict[str, Any]:
        order = orders().create(
            severity=body.severity, reason=body.reason, run_id=body.run_id, task_id=api.task_key(body.task_id)
        )
        return work_order_view(order)

    opening = Rule(
        "workorders:create", FirstOf((RunOf("body.run_id"), TaskOf("body.task_id"), Environment()))
    )
    api.post("/workorders", opening, summary="Open a work order by hand")(create)
    api.post("/ops/workorders", opening, summary="Open a work order by hand (the seeds' path)")(create)

    @api.post(
        "/workorders/<work_order_id>/ack", on_order("workorders:ack"), summary="Acknowledge a work order"
    )
    def ack(work_order_id: str, body: Ack | None = None) -> dict[str, Any]:
        order, changed = orders().ack(work_order_id, (body or Ack()).note)
        return {**work_order_view(order), "changed": changed}

    @api.post(
        "/workorders/<work_order_id>/resolve", on_order("workorders:resolve"), summary="Resolve a work order"
    )
    def resolve(work_order_id: str, body: Resolve) -> dict[str, Any]:
        return work_order_view(orders().resolve(work_order_id, body.resolution, body.note))
