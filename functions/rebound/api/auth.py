"""Who is calling, and whether they may: the one place an authorization decision is made.

The actor of every change is the caller's IAM identity from the request context (API Gateway
fills it after checking the SigV4 signature), never a field of the body. ``authorize`` receives
the caller, the action and the tenant being touched, so tenant scoping is enforced here, for the
ops API, the console (which serves the same routes with the operator's identity) and the CLI
(``Gate``, with the identity ``sts:GetCallerIdentity`` names). Which tenants a caller has comes from
``rebound.ops.access.TenantAccess``; a refusal is recorded there, on the tenant's audit chain.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rebound.domain.errors import Forbidden as Forbidden
from rebound.ops.access import TenantAccess, Tenants

ADMIN_ACTIONS = frozenset(
    {
        "policies:write",  # retry policies are shared by every tenant
        "flags:write",  # so are the environment's feature flags
        "resources:write",  # so are workstream resources
        "notifications:retry",
        "audit:verify",  # reads any chain
        "audit:archive",  # copies any chain to the archive
        "tenants:grant",
        "tenants:revoke",
        "tenants:migrate",
        "retention:migrate",  # every tenant's runs
        "runs:migrate-index",  # every tenant's runs
        "state:check",  # every tenant's items against their chains
        "state:repair",
    }
)
"""Actions on what every tenant shares: administrators only (``*`` among their tenants)."""


@dataclass(frozen=True)
class Caller:
    arn: str
    """The caller's IAM identity (user or assumed-role ARN), the actor recorded in audit trails."""
    tenants: Tenants = field(default_factory=lambda: Tenants(frozenset({"*"})))
    """The tenants it may act on (``TenantAccess.tenants_of``)."""

    @property
    def actor(self) -> str:
        return self.arn


def caller_of(event: Any, access: TenantAccess | None = None) -> Caller:
    """The caller of a REST API event (``requestContext.identity.userArn``) with its tenants (from
    ``access``); ``Forbidden`` if the request carries no identity (IAM authorization is off, or the
    event was not from API Gateway)."""
    context = (event.get("requestContext") if isinstance(event, dict) else None) or {}
    identity = context.get("identity") or {}
    arn = identity.get("userArn") or identity.get("caller")
    if not arn:
        raise Forbidden("the request carries no caller identity; the ops API needs IAM (SigV4) authorization")
    if access is None:
        return Caller(str(arn))
    return Caller(str(arn), access.tenants_of(str(arn)))


def authorize(caller: Caller, action: str, tenant: str | None = None) -> None:
    """Raise ``Forbidden`` unless ``caller`` may do ``action`` (on ``tenant``).

    - an administrator (``*``) may do everything;
    - an action on what all tenants share (``ADMIN_ACTIONS``) needs an administrator;
    - an action on a tenant's task, run, DLQ message or work order needs that tenant;
    - an action naming no tenant (a list, which is then filtered to the caller's tenants; queue
      depths; health) needs at least one tenant.
    """
    tenants = caller.tenants
    if tenants.admin:
        return
    held = ", ".join(tenants.as_list()) or "none"
    if action in ADMIN_ACTIONS:
        raise Forbidden(
            f"{caller.arn} may not {action}: it is for administrators (tenants: *); its tenants: {held}",
            action=action,
        )
    if tenant is None:
        if not tenants.names:
            raise Forbidden(
                f"{caller.arn} may not {action}: it has no tenant (an administrator grants one with "
                "`rebound tenants grant`)",
                action=action,
            )
        return
    if not tenants.covers(tenant):
        raise Forbidden(
            f"{caller.arn} may not {action} on tenant {tenant!r}; its tenants: {held}",
            action=action,
            tenant=tenant,
        )


class Gate:
    """``authorize`` for one caller, recording every refusal: what the operations are given as
    their ``Guard`` (``rebound.ops.access``)."""

    def __init__(self, caller: Caller, access: TenantAccess) -> None:
        self.caller = caller
        self.access = access

    def check(self, action: str, tenant: str | None = None) -> None:
        try:
            authorize(self.caller, action, tenant)
        except Forbidden as exc:
            self.access.record_refusal(self.caller.arn, action, tenant, exc.message)
            raise

    def sees(self, tenant: str) -> bool:
        return self.caller.tenants.covers(tenant)

    def held(self) -> Tenants:
        return self.caller.tenants
