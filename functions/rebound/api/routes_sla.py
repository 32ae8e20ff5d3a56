"""Routes for the pre-flight dry run of a task document and the SLA report (with its rebuild)."""

from __future__ import annotations

from typing import Annotated, Any

from aws_lambda_powertools.event_handler.openapi.params import Query
from pydantic import BaseModel, Field

from rebound.api.app import Api
from rebound.ops.authz import (
    Documents,
    Environment,
    FirstOf,
    Rule,
    TaskOf,
    TenantFilter,
    TenantOf,
    document_tenants,
)
from rebound.ops.preflight import PreflightOps, parse_window
from rebound.ops.sla_report import SlaReportOps


class Dryrun(BaseModel):
    document: dict[str, Any] = Field(description="a task document as a task file holds it (tasks, tenants)")
    window: str = Field(default="24h", max_length=16, description="how far ahead to look (1m to 7d)")


class Rebuild(BaseModel):
    since: str = Field(default="7d", max_length=40, description="a duration ago (7d) or a timestamp")
    tenant: str | None = Field(default=None, max_length=48, description="only this tenant's tasks")


def register(api: Api) -> None:
    @api.post(
        "/tasks/dryrun",
        Rule("tasks:read", Documents("body.document", document_tenants)),
        summary="Pre-flight a task document: fires, quota headroom, conflicts",
    )
    def dryrun(body: Dryrun) -> dict[str, Any]:
        ops = PreflightOps(api.deps(), sees=api.gate().sees)
        document = ops.parse(body.document)
        return ops.dryrun(document, parse_window(body.window)).as_dict()

    @api.get(
        "/sla/report",
        Rule("sla:read", FirstOf((TaskOf("task_id"), TenantFilter("tenant")))),
        summary="On time, missed fires, SLA breaches and start delays by task and tenant",
    )
    def sla_report(
        since: Annotated[str, Query(max_length=40, description="a duration ago (7d) or a timestamp")] = "7d",
        tenant: Annotated[str | None, Query(max_length=48, description="only this tenant's tasks")] = None,
        task_id: Annotated[str | None, Query(max_length=48, description="only this task")] = None,
    ) -> dict[str, Any]:
        if task_id is not None:
            task_id = api.task_key(task_id)
            if tenant is not None and not api.sees(tenant):
                api.gate().check("sla:read", tenant)
        else:
            tenant = api.tenant
        return SlaReportOps(api.deps()).report(since, tenant=tenant, task_id=task_id).as_dict()

    @api.post(
        "/sla/rebuild",
        Rule("sla:rebuild", FirstOf((TenantOf("body.tenant"), Environment()))),
        summary="Recompute the SLA figures from the runs and rewrite the SLA counters",
    )
    def sla_rebuild(body: Rebuild) -> dict[str, Any]:
        return (
            SlaReportOps(api.deps(), api.caller.actor)
            .report(body.since, tenant=body.tenant, rebuild=True)
            .as_dict()
        )
