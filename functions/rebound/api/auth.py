"""Who is calling, and whether they may: the one place an authorization decision is made.

The actor of every change is the caller's IAM identity from the request context (API Gateway
fills it after checking the SigV4 signature), never a field of the body. ``authorize`` receives
the caller, the action and the tenant being touched, so tenant scoping is enforced here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rebound.domain.errors import ReboundError


class Forbidden(ReboundError):
    code = "FORBIDDEN"
    http_status = 403


@dataclass(frozen=True)
class Caller:
    arn: str
    """The caller's IAM identity (user or assumed-role ARN), the actor recorded in audit trails."""

    @property
    def actor(self) -> str:
        return self.arn


def caller_of(event: Any) -> Caller:
    """The caller of a REST API event (``requestContext.identity.userArn``); ``Forbidden`` if the
    request carries no identity (IAM authorization is off, or the event was not from API Gateway)."""
    context = (event.get("requestContext") if isinstance(event, dict) else None) or {}
    identity = context.get("identity") or {}
    arn = identity.get("userArn") or identity.get("caller")
    if not arn:
        raise Forbidden("the request carries no caller identity; the ops API needs IAM (SigV4) authorization")
    return Caller(str(arn))


def authorize(caller: Caller, action: str, tenant: str | None = None) -> None:
    """Raise ``Forbidden`` unless ``caller`` may do ``action`` (on ``tenant``). Today every caller
    with an identity may (API Gateway's IAM policy is the gate, and ``caller_of`` already refused a
    request without one); tenant scoping rules are added here and only here."""
    return
