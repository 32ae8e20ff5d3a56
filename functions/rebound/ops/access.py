"""Which tenants an identity may act on, and the grants that say so.

Two sources, added together:

- the environment's ``identities:`` (``Settings.identities``: identity -> tenants, ``*`` for all
  tenants), deployed with the stack; the local cloud's is ``{"*": ["*"]}`` (whoever runs it is
  an administrator on their own machine);
- grants in the control table (``identity#<arn>``), kept by ``rebound tenants grant|revoke``
  (administrators only), each change audited on the tenant's chain (``tenant#<t>``).

An identity is the caller's IAM ARN. An assumed-role session
(``arn:aws:sts::<account>:assumed-role/<role>/<session>``) also matches its role's ARN
(``arn:aws:iam::<account>:role/<role>``), so a grant to a role covers every session of it.

The decision itself is ``rebound.api.auth.authorize``; the operations take a ``Guard`` (the API's
and the CLI's check the caller with ``authorize``; ``UNGUARDED`` is for the engine's own use).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from rebound.domain.basics import TENANT_PATTERN
from rebound.domain.errors import Conflict, ValidationFailed
from rebound.domain.ids import tenant_subject
from rebound.domain.stored import StoredTask
from rebound.domain.tenancy import ALL_TENANTS, SEPARATOR, short_id
from rebound.engine.deps import Deps
from rebound.engine.ports import Store

GRANT_PREFIX = "identity#"
_ASSUMED_ROLE = re.compile(r"^arn:(aws[a-z-]*):sts::(\d{12}):assumed-role/([^/]+)/[^/]+$")
_TENANT = re.compile(TENANT_PATTERN)


class Guard(Protocol):
    """What an operation asks before it touches a tenant's task, run, message or work order."""

    def check(self, action: str, tenant: str | None = None) -> None:
        """Raise ``Forbidden`` (after recording the refusal) unless the caller may."""
        ...

    def sees(self, tenant: str) -> bool:
        """Whether the caller may read ``tenant``'s things (lists leave the others out)."""
        ...

    def held(self) -> Tenants:
        """The caller's tenants."""
        ...


class _Unguarded:
    def check(self, action: str, tenant: str | None = None) -> None:
        return None

    def sees(self, tenant: str) -> bool:
        return True

    def held(self) -> Tenants:
        return Tenants(frozenset({ALL_TENANTS}))


UNGUARDED: Guard = _Unguarded()
"""For Rebound's own functions (the engine acts for every tenant) and library use."""


def find_task(
    store: Store, task_id: str, guard: Guard = UNGUARDED, field: str = "task_id"
) -> StoredTask | None:
    """The task ``task_id`` names: its key (``acme.nightly``), or a short id (``nightly``) that
    exactly one of the tasks the caller may see has. A short id several of them share is refused
    with their keys, so the caller can qualify it; ``None`` when nothing matches."""
    stored = store.get_task(task_id)
    if stored is not None or SEPARATOR in task_id:
        return stored
    found = [s for s in store.list_tasks() if short_id(s.task.id) == task_id and guard.sees(s.task.tenant)]
    if len(found) > 1:
        keys = ", ".join(sorted(s.task.id for s in found))
        raise ValidationFailed(
            f"{field}: task id {task_id!r} names several tenants' tasks ({keys}); give TENANT.ID",
            key_path=field,
        )
    return found[0] if found else None


def task_key(store: Store, task_id: str, guard: Guard = UNGUARDED, field: str = "task_id") -> str:
    """The key of the task ``task_id`` names (see ``find_task``); ``task_id`` itself when no task
    matches, so that what is looked up with it finds nothing, as before."""
    stored = find_task(store, task_id, guard, field)
    return stored.task.id if stored is not None else task_id


def bound_tenant(guard: Guard, action: str, tenant: str | None, field: str = "tenant") -> str | None:
    """The tenant a filtered request is about: the one given (checked), else for a caller with
    exactly one tenant that one; an administrator may leave it out (every tenant), anyone else
    with several tenants must name one."""
    tenants = guard.held()
    if tenant is None and not tenants.admin:
        guard.check(action)  # a caller with no tenant is refused (and that is audited)
        if len(tenants.names) != 1:
            held = ", ".join(tenants.as_list())
            raise ValidationFailed(f"{field}: name one of your tenants ({held})", field=field)
        (tenant,) = tenants.names
    guard.check(action, tenant)
    return tenant


def identity_keys(arn: str) -> tuple[str, ...]:
    """The identities ``arn`` answers to: itself, and for an assumed-role session its role."""
    match = _ASSUMED_ROLE.match(arn)
    if match is None:
        return (arn,)
    partition, account, role = match.groups()
    return (arn, f"arn:{partition}:iam::{account}:role/{role}")


@dataclass(frozen=True)
class Tenants:
    """The tenants an identity may act on."""

    names: frozenset[str]

    @property
    def admin(self) -> bool:
        return ALL_TENANTS in self.names

    def covers(self, tenant: str) -> bool:
        return self.admin or tenant in self.names

    def as_list(self) -> list[str]:
        return sorted(self.names)


def check_tenant_names(tenants: Iterable[str], field: str = "tenants") -> list[str]:
    out = []
    for name in tenants:
        if name != ALL_TENANTS and not _TENANT.match(name):
            raise ValidationFailed(
                f"{field}: {name!r} is not a tenant name ([a-z0-9][a-z0-9_-], at most 48) or *",
                key_path=field,
            )
        out.append(name)
    return out


class TenantAccess:
    """The identities -> tenants mapping of one environment (configuration plus stored grants)."""

    def __init__(self, deps: Deps) -> None:
        self.deps = deps

    @property
    def configured(self) -> bool:
        """Whether the environment names identities at all; a resources document written before
        tenancy names none, and then every caller is an administrator, as before."""
        return self.deps.settings.identities is not None

    @property
    def everyone_admin(self) -> bool:
        """Whether every caller is an administrator here (not configured, or ``"*": ["*"]``), so no
        one needs to be asked who they are."""
        identities = self.deps.settings.identities
        return identities is None or ALL_TENANTS in identities.get(ALL_TENANTS, ())

    def tenants_of(self, arn: str) -> Tenants:
        identities = self.deps.settings.identities
        if identities is None:
            return Tenants(frozenset({ALL_TENANTS}))
        names: set[str] = set(identities.get(ALL_TENANTS, ()))
        if ALL_TENANTS in names:  # everyone is an administrator: nothing more to read
            return Tenants(frozenset(names))
        for key in identity_keys(arn):
            names.update(identities.get(key, ()))
            names.update(self.granted(key))
        return Tenants(frozenset(names))

    def granted(self, identity: str) -> list[str]:
        """The tenants stored grants give ``identity`` (exactly this identity, no role matching)."""
        item = self.deps.store.get_key(GRANT_PREFIX + identity) or {}
        body = json.loads(item["body"]) if isinstance(item.get("body"), str) else {}
        return [str(t) for t in body.get("tenants", ())]

    def grant(self, identity: str, tenants: Iterable[str], *, actor: str) -> list[str]:
        """Add ``tenants`` to ``identity``'s grants; returns its grants after the change."""
        return self._change(identity, check_tenant_names(tenants), actor=actor, add=True)

    def revoke(self, identity: str, tenants: Iterable[str], *, actor: str) -> list[str]:
        return self._change(identity, check_tenant_names(tenants), actor=actor, add=False)

    def _change(self, identity: str, tenants: list[str], *, actor: str, add: bool) -> list[str]:
        if not identity.startswith("arn:"):
            raise ValidationFailed(f"identity: expected an IAM ARN, got {identity!r}", key_path="identity")
        before = set(self.granted(identity))
        after = before | set(tenants) if add else before - set(tenants)
        changed = sorted(after ^ before)
        if not changed:
            return sorted(after)
        uow = self.deps.store.unit_of_work(actor, self.deps.clock.now())
        uow.stage_record(GRANT_PREFIX + identity, {"tenants": sorted(after)}, "grant")
        for tenant in changed:
            uow.append_audit(
                tenant_subject(tenant),
                action="access-granted" if add else "access-revoked",
                evidence={"identity": identity, "tenants_after": sorted(after)},
            )
        uow.commit()
        return sorted(after)

    def record_refusal(self, arn: str, action: str, tenant: str | None, why: str) -> None:
        """One audit record of a refused request, on the tenant's chain (``tenant#*`` for an
        administrator's action), with the caller as actor."""
        subject = tenant_subject(tenant or ALL_TENANTS)
        store = self.deps.store

        def write() -> None:
            uow = store.unit_of_work(arn, self.deps.clock.now())
            uow.append_audit(
                subject, action="access-refused", evidence={"action": action, "tenant": tenant, "reason": why}
            )
            uow.commit()

        for n in range(1, 9):  # another record took the chain's next place: read its head again
            try:
                store.retrying(8, write)
                return
            except Conflict:
                if n == 8:
                    raise
