"""``/approvals``: the requests for a second operator (``rebound.ops.approvals``), listed, shown,
approved and rejected. An action held for approval answers 202 with code ``APPROVAL_REQUIRED``
and the request's id, wherever it was asked."""

from __future__ import annotations

from typing import Annotated, Any

from aws_lambda_powertools.event_handler.openapi.params import Query
from pydantic import BaseModel, Field

from rebound.api.app import Api
from rebound.domain.approvals import REDRIVE
from rebound.ops.approval_carriers import redrive_as_job
from rebound.ops.approvals import Approvals, default_carriers
from rebound.ops.authz import ApprovalOf, Rule, rule


class Decision(BaseModel):
    note: str = Field(default="", max_length=500, description="why, for the audit trail")


def register(api: Api) -> None:
    def ops() -> Approvals:
        # An approved redrive starts a redrive job: this call has 29 s, the redrive may not.
        carriers = {**default_carriers(), REDRIVE: redrive_as_job(api.continuation)}
        return Approvals(api.deps(), api.caller.actor, carriers)

    @api.get("/approvals", rule("approvals:read"), summary="Requests waiting for a second operator")
    def list_approvals(
        closed: Annotated[bool, Query(description="the latest closed requests too")] = False,
    ) -> list[dict[str, Any]]:
        return [r.view() for r in ops().list(sees=api.sees, closed=closed)]

    @api.get(
        "/approvals/<request_id>", Rule("approvals:read", ApprovalOf("request_id")), summary="One request"
    )
    def show_approval(request_id: str) -> dict[str, Any]:
        return ops().get(request_id).view()

    @api.post(
        "/approvals/<request_id>/approve",
        Rule("approvals:approve", ApprovalOf("request_id")),
        summary="Approve a request and carry its action out (never the requester's own)",
    )
    def approve(request_id: str, body: Decision | None = None) -> dict[str, Any]:
        """A redrive is started as a redrive job that acts as the approver: its outcome names the
        job (``redrive_job``); poll ``GET /dlq/redrive-jobs/{job_id}``."""
        return ops().approve(request_id, (body or Decision()).note).view()

    @api.post(
        "/approvals/<request_id>/reject",
        Rule("approvals:approve", ApprovalOf("request_id")),
        summary="Reject a request: nothing is done",
    )
    def reject(request_id: str, body: Decision | None = None) -> dict[str, Any]:
        return ops().reject(request_id, (body or Decision()).note).view()
