"""Who may do what: the rule every route of the ops API and every CLI command declares.

A ``Rule`` is an action (``runs:retry``) and an ``Owner``: how the tenant the request touches is
found. It is declared where the route or the command is declared (``Api.route``,
``rebound_cli.authz.authorized``), and ``decide`` applies it before the operation reads anything
for the caller. ``tests/integration/test_authorization_generated.py`` walks the route table and
the command tree, fails on anything without a rule, and runs every route and command against
another tenant's things.

How the tenant is found, by owner:

- an object's tenant comes from the object, never from the request: a run's from its id (run ids
  start with their task's key, ``<tenant>.<id>``), a task's from its key, a work order's, a DLQ
  message's and a redrive job's from their records, a workstream's from its definition;
- an object the caller may not see answers exactly as one that does not exist (the same error,
  code and message), and the refusal is audited on the tenant's chain all the same;
- a list needs some tenant, and shows only the caller's tenants' things;
- what every tenant shares (policies, resource limits, identities, environment work orders, the
  audit of every chain) is changed by administrators only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from rebound.domain.errors import Forbidden, MessageNotFound, NotFound, RunNotFound, WorkOrderNotFound
from rebound.domain.tenancy import ALL_TENANTS, tenant_of_run
from rebound.engine.deps import Deps
from rebound.engine.workstreams import WorkstreamNotFound, Workstreams
from rebound.ops.access import Guard, bound_tenant, find_task

Args = Mapping[str, Any]


def arg(args: Args, name: str) -> Any:
    """The value ``name`` names in a request's (or a command's) arguments: a parameter, or a field
    of one (``body.run_id``)."""
    head, _, rest = name.partition(".")
    value = args.get(head)
    for part in rest.split(".") if rest else ():
        value = value.get(part) if isinstance(value, dict) else getattr(value, part, None)
    return value


class Owner(Protocol):
    """How a rule finds the tenant a request touches."""

    def given(self, args: Args) -> bool:
        """Whether the request names what this owner finds (``FirstOf`` tries the next if not)."""
        ...

    def decide(self, action: str, guard: Guard, deps: Deps, args: Args) -> str | None:
        """Check the caller (``guard.check``, which audits a refusal); the tenant decided on."""
        ...


def _masked(guard: Guard, action: str, tenant: str | None, missing: NotFound) -> str | None:
    """Refuse as ``missing`` (an object the caller may not see answers as one that does not
    exist), after the refusal is audited by ``guard.check``."""
    try:
        guard.check(action, tenant)
    except Forbidden:
        raise missing from None
    return tenant


@dataclass(frozen=True)
class Public:
    """No identity is needed (``GET /health``, the OpenAPI document)."""

    why: str = "nobody: public"
    """Why nobody is asked (shown in the docs and the generated test's failures)."""

    def given(self, args: Args) -> bool:
        return True

    def decide(self, action: str, guard: Guard, deps: Deps, args: Args) -> str | None:
        return None


@dataclass(frozen=True)
class Listing:
    """A list or a summary: the caller needs some tenant, and sees only its tenants' things."""

    def given(self, args: Args) -> bool:
        return True

    def decide(self, action: str, guard: Guard, deps: Deps, args: Args) -> str | None:
        guard.check(action, None)
        return None


@dataclass(frozen=True)
class Environment:
    """What every tenant shares: an administrator (``*``) only."""

    def given(self, args: Args) -> bool:
        return True

    def decide(self, action: str, guard: Guard, deps: Deps, args: Args) -> str | None:
        guard.check(action, ALL_TENANTS)
        return ALL_TENANTS


@dataclass(frozen=True)
class TenantFilter:
    """A request about one tenant, named by ``param`` (``--tenant``); a caller with one tenant may
    leave it out, an administrator too (every tenant). Naming a tenant one lacks is refused."""

    param: str

    def given(self, args: Args) -> bool:
        return True

    def decide(self, action: str, guard: Guard, deps: Deps, args: Args) -> str | None:
        return bound_tenant(guard, action, arg(args, self.param), field=self.param.rpartition(".")[2])


@dataclass(frozen=True)
class TenantOf:
    """The tenant ``param`` names, as given (with ``FirstOf``, when it is given)."""

    param: str

    def given(self, args: Args) -> bool:
        return arg(args, self.param) is not None

    def decide(self, action: str, guard: Guard, deps: Deps, args: Args) -> str | None:
        tenant = str(arg(args, self.param))
        guard.check(action, tenant)
        return tenant


@dataclass(frozen=True)
class RunOf:
    """The tenant of run ``param``, from its id (a run id starts with its task's key). An id that
    names no tenant (a run of before tenancy) is looked up."""

    param: str
    missing: Callable[[str], NotFound] = RunNotFound.of

    def given(self, args: Args) -> bool:
        return arg(args, self.param) is not None

    def decide(self, action: str, guard: Guard, deps: Deps, args: Args) -> str | None:
        run_id = str(arg(args, self.param))
        tenant = tenant_of_run(run_id)
        if tenant is None:
            run = deps.store.get_run(run_id)
            tenant = run.tenant if run is not None else None
        # an id of no tenant that is not stored (a run of before tenancy, gone): administrators'
        return _masked(guard, action, tenant or ALL_TENANTS, self.missing(run_id))


@dataclass(frozen=True)
class TaskOf:
    """The tenant of task ``param``: its key, or a short id one task the caller may see has."""

    param: str

    def given(self, args: Args) -> bool:
        return arg(args, self.param) is not None

    def decide(self, action: str, guard: Guard, deps: Deps, args: Args) -> str | None:
        from rebound.domain.errors import TaskNotFound

        task_id = str(arg(args, self.param))
        stored = find_task(deps.store, task_id, guard, field=self.param.rpartition(".")[2])
        if stored is None:
            raise TaskNotFound.of(task_id)
        return _masked(guard, action, stored.task.tenant, TaskNotFound.of(task_id))


@dataclass(frozen=True)
class WorkOrderOf:
    """The tenant of work order ``param``, from its record. An order of no tenant (a health
    finding's, one opened about the environment) is read by any tenant, changed by administrators."""

    param: str

    def given(self, args: Args) -> bool:
        return arg(args, self.param) is not None

    def decide(self, action: str, guard: Guard, deps: Deps, args: Args) -> str | None:
        order_id = str(arg(args, self.param))
        order = deps.store.get_work_order(order_id)
        if order is None:
            raise WorkOrderNotFound.of(order_id)
        if order.tenant is None:
            tenant = None if action.endswith(":read") else ALL_TENANTS
            guard.check(action, tenant)
            return tenant
        return _masked(guard, action, order.tenant, WorkOrderNotFound.of(order_id))


@dataclass(frozen=True)
class ApprovalOf:
    """The tenant of approval request ``param``, from its record (a request about what every
    tenant shares, a retry policy's change: administrators only)."""

    param: str

    def given(self, args: Args) -> bool:
        return arg(args, self.param) is not None

    def decide(self, action: str, guard: Guard, deps: Deps, args: Args) -> str | None:
        from rebound.ops.approvals import ApprovalNotFound, Approvals

        request_id = str(arg(args, self.param))
        missing = ApprovalNotFound(f"no approval request {request_id!r}", request_id=request_id)
        try:
            tenant = Approvals(deps, "authz").tenant_of(request_id)
        except ApprovalNotFound:
            raise missing from None
        return _masked(guard, action, tenant, missing)


@dataclass(frozen=True)
class MessageOf:
    """The tenant of DLQ message ``param``: its run's, from the DLQ's record of it (or the
    archive's). A message about no run (one no run could be read from) is the environment's:
    administrators only."""

    param: str

    def given(self, args: Args) -> bool:
        return arg(args, self.param) is not None

    def decide(self, action: str, guard: Guard, deps: Deps, args: Args) -> str | None:
        message_id = str(arg(args, self.param))
        entry = deps.store.get_dlq_entry(message_id)
        found = entry is not None
        run_id, tenant = (entry.run_id, entry.tenant) if entry is not None else (None, None)
        if entry is None and deps.archive is not None:
            archived = deps.archive.get(message_id)
            if archived is not None:
                from rebound.ops.dlq.message import from_stored

                message = from_stored(archived)
                found, run_id, tenant = True, message.run_id, message.tenant
        if not found:
            raise MessageNotFound.of(message_id)
        owner = (tenant_of_run(run_id) if run_id else None) or tenant
        return _masked(guard, action, owner or ALL_TENANTS, MessageNotFound.of(message_id))


@dataclass(frozen=True)
class JobOf:
    """The tenant of redrive job ``param``: the tenant its filters name (a job over every tenant
    was an administrator's, and is theirs to see)."""

    param: str

    def given(self, args: Args) -> bool:
        return arg(args, self.param) is not None

    def decide(self, action: str, guard: Guard, deps: Deps, args: Args) -> str | None:
        from rebound.ops.dlq.jobs import JOB_PREFIX, RedriveJobNotFound, job_tenant

        job_id = str(arg(args, self.param))
        missing = RedriveJobNotFound.of(job_id)
        record = deps.store.get_key(JOB_PREFIX + job_id)
        if record is None or "job" not in record:
            raise missing
        return _masked(guard, action, job_tenant(record) or ALL_TENANTS, missing)


@dataclass(frozen=True)
class WorkstreamOf:
    """The tenant of a workstream (``kind="workstream"``), of a workstream run (``"run"``), or of
    either (``"ref"``: a workstream's id, else a run's), from its record."""

    param: str
    kind: str = "ref"

    def given(self, args: Args) -> bool:
        return arg(args, self.param) is not None

    def decide(self, action: str, guard: Guard, deps: Deps, args: Args) -> str | None:
        ref = str(arg(args, self.param))
        engine = Workstreams(deps, "reader")
        if self.kind == "workstream":
            missing = WorkstreamNotFound.workstream(ref)
        else:
            missing = WorkstreamNotFound.run(ref)
        try:
            if self.kind == "workstream" or (self.kind == "ref" and ref in engine.ids()):
                tenant = engine.definition(ref)[0].tenant
            else:
                tenant = engine.get_run(ref).tenant
        except WorkstreamNotFound:
            raise missing from None
        return _masked(guard, action, tenant, missing)


@dataclass(frozen=True)
class Documents:
    """Every tenant a task document names (its tasks', workstreams' and ``tenants:``), from the
    document ``param`` holds (a parsed document, or the path of a task file): each one needed."""

    param: str
    tenants_of: Callable[[Any], list[str]]

    def given(self, args: Args) -> bool:
        return True

    def decide(self, action: str, guard: Guard, deps: Deps, args: Args) -> str | None:
        tenants = sorted(set(self.tenants_of(arg(args, self.param))))
        if not tenants:
            guard.check(action, None)
        for tenant in tenants:
            guard.check(action, tenant)
        return tenants[0] if len(tenants) == 1 else None


@dataclass(frozen=True)
class FirstOf:
    """The first of ``owners`` whose parameter the request gives (``POST /workorders``: its run's
    tenant, else its task's, else the environment's)."""

    owners: tuple[Owner, ...]

    def given(self, args: Args) -> bool:
        return True

    def decide(self, action: str, guard: Guard, deps: Deps, args: Args) -> str | None:
        for owner in self.owners:
            if owner.given(args):
                return owner.decide(action, guard, deps, args)
        raise AssertionError("FirstOf needs a last owner that is always given")


@dataclass(frozen=True)
class When:
    """``owner`` (with ``action`` instead of the rule's, if given) when flag ``param`` is set: with
    ``FirstOf``, an option that changes what a command does (``sla report --rebuild``)."""

    param: str
    owner: Owner
    action: str | None = None

    def given(self, args: Args) -> bool:
        return bool(arg(args, self.param))

    def decide(self, action: str, guard: Guard, deps: Deps, args: Args) -> str | None:
        return self.owner.decide(self.action or action, guard, deps, args)


@dataclass(frozen=True)
class Rule:
    """What a route or a command needs: ``action`` on the tenant ``owner`` finds."""

    action: str
    owner: Owner

    def decide(self, guard: Guard, deps: Deps, args: Args) -> str | None:
        return self.owner.decide(self.action, guard, deps, args)

    @property
    def public(self) -> bool:
        return isinstance(self.owner, Public)


def rule(action: str, owner: Owner | None = None) -> Rule:
    """``Rule(action, owner)``; without an owner, a list (``Listing``)."""
    return Rule(action, owner if owner is not None else Listing())


def document_tenants(document: Any) -> list[str]:
    """Every tenant a task document names (its tasks', its workstreams', its ``tenants:``): a
    parsed document, or the path of a task file (read, not yet checked: the loader checks it)."""
    if isinstance(document, (str, Path)):
        from rebound.config.loader import load_yaml

        document = load_yaml(document)
    if not isinstance(document, dict):
        return []
    named: list[Any] = []
    for section in ("tasks", "workstreams"):
        entries = document.get(section)
        named += (
            [e.get("tenant") for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []
        )
    tenants = document.get("tenants")
    named += list(tenants) if isinstance(tenants, dict) else []
    return sorted({n for n in named if isinstance(n, str) and n})
