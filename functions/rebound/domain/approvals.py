"""Four eyes: the actions an environment lets one operator ask for and only a second carry out.

``ApprovalRules`` (``approvals:`` in ``config/environments/<env>.yaml``) names which actions need a
second operator. Such an action, asked for, changes nothing: it becomes an ``ApprovalRequest``
(who, what, why, until when), which a different operator with rights on its tenant approves (the
action is then carried out once, as the approver, audited with both) or rejects. A request past its
``expires_at`` does nothing.

A request's life: ``pending`` -> ``approved`` -> ``done``, or ``pending`` -> ``rejected`` or
``expired``. ``approved`` is the approver's claim: the action is carried out after it, and a
crash in between is finished by the approver asking again (``rebound approvals approve``), which
finds the action already carried out if it was (its subject's audit chain names the request).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from rebound.domain.errors import ReboundError

SKIP = "runs:skip"
CANCEL = "runs:cancel"
RESOLVE = "workorders:resolve"
POLICY = "policies:write"
REDRIVE = "dlq:redrive"

ACTIONS: dict[str, str] = {
    SKIP: "skip a run behind a critical work order",
    CANCEL: "cancel a run behind a critical work order",
    RESOLVE: "resolve a critical work order",
    POLICY: "change a retry policy",
    REDRIVE: "redrive more than redrive_over messages from the DLQ",
}
"""Each action a rule can hold for a second operator, and when it does."""


class ApprovalRules(BaseModel):
    """``approvals:`` of an environment. The defaults: runs behind a ``critical`` work order are
    skipped, cancelled or resolved by two operators; a redrive of more than 100 messages too; a
    retry policy is changed by two in ``prod`` only."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    critical_runs: bool = Field(
        default=True, description="skipping, cancelling or resolving a run behind a critical work order"
    )
    redrive_over: int | None = Field(
        default=100, ge=0, description="a DLQ redrive of more messages than this (null: never held)"
    )
    policy_changes: bool | None = Field(
        default=None, description="changing a retry policy (null: in the environment named prod only)"
    )
    expires_after_s: int = Field(
        default=24 * 3600, ge=300, le=14 * 24 * 3600, description="how long a request waits: 5 min to 14 days"
    )

    def policies_need_approval(self, environment: str) -> bool:
        return self.policy_changes if self.policy_changes is not None else environment == "prod"

    @property
    def expires_after(self) -> timedelta:
        return timedelta(seconds=self.expires_after_s)


class ApprovalState(StrEnum):
    PENDING = "pending"
    APPROVED = "approved"
    DONE = "done"
    REJECTED = "rejected"
    EXPIRED = "expired"


OPEN = frozenset({ApprovalState.PENDING, ApprovalState.APPROVED})


class ApprovalRequest(BaseModel):
    """One request for a second operator: the action, what it names, and its decision."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    request_id: str
    action: str
    tenant: str
    subject: str = Field(description="what the action acts on: a run, a work order, the DLQ, a policy")
    args: dict[str, Any] = Field(description="the action's arguments, as the requester gave them")
    reason: str
    requested_by: str
    requested_at: datetime
    expires_at: datetime
    state: ApprovalState = ApprovalState.PENDING
    decided_by: str | None = None
    decided_at: datetime | None = None
    note: str | None = None
    outcome: dict[str, Any] | None = None

    def expired(self, now: datetime) -> bool:
        return self.state is ApprovalState.PENDING and now >= self.expires_at

    def view(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


class ApprovalRequired(ReboundError):
    """The action was not carried out: it waits for a second operator (``request``)."""

    code = "APPROVAL_REQUIRED"
    http_status = 202

    def __init__(self, request: ApprovalRequest) -> None:
        super().__init__(
            f"{ACTIONS[request.action]} needs a second operator: request {request.request_id} is pending "
            f"until {request.expires_at.isoformat()}; someone else with rights on {request.tenant} runs "
            f"`rebound approvals approve {request.request_id}` (or rejects it)",
            request_id=request.request_id,
            action=request.action,
            subject=request.subject,
            expires_at=request.expires_at.isoformat(),
        )
        self.request = request


def approval_subject(request_id: str) -> str:
    """The audit chain of a request."""
    return f"approval#{request_id}"


def approval_evidence(request: ApprovalRequest | None) -> dict[str, Any]:
    """What an action carried out for ``request`` adds to its audit record (nothing without one):
    the request, who asked and who approved. ``rebound.ops.approvals`` finds the record by it."""
    if request is None:
        return {}
    return {
        "approval": request.request_id,
        "requested_by": request.requested_by,
        "approved_by": request.decided_by,
    }
