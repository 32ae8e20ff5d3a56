"""What the generated authorization tests need from a rule: which of a request's parameters name
acme's things (``named``), the values that name them and a sibling that names nothing, and what a
caller must be answered (``expected``). Nothing here lists routes or commands: the tests walk the
route table and the command tree, and read each one's declared rule."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tenancy_world import World

from rebound.api.app import build_app, openapi_document
from rebound.ops.authz import (
    ApprovalOf,
    Documents,
    Environment,
    FirstOf,
    JobOf,
    Listing,
    MessageOf,
    Owner,
    Public,
    Rule,
    RunOf,
    TaskOf,
    TenantFilter,
    TenantOf,
    When,
    WorkOrderOf,
    WorkstreamOf,
    arg,
)

OBJECT_KINDS = ("run", "task", "work_order", "message", "job", "workstream", "workstream_run", "approval")
"""Kinds of thing whose route answers another tenant's as unknown (404, exit 4)."""


def kind_of(owner: Owner) -> str:
    if isinstance(owner, RunOf):
        return "run"
    if isinstance(owner, TaskOf):
        return "task"
    if isinstance(owner, WorkOrderOf):
        return "work_order"
    if isinstance(owner, MessageOf):
        return "message"
    if isinstance(owner, JobOf):
        return "job"
    if isinstance(owner, ApprovalOf):
        return "approval"
    if isinstance(owner, WorkstreamOf):
        return "workstream" if owner.kind in ("workstream", "ref") else "workstream_run"
    if isinstance(owner, TenantFilter | TenantOf):
        return "tenant"
    if isinstance(owner, Documents):
        return "document"
    if isinstance(owner, Environment):
        return "environment"
    if isinstance(owner, Public):
        return "public"
    assert isinstance(owner, Listing), f"a kind of owner the generated tests do not know: {owner!r}"
    return "listing"


def named(owner: Owner) -> dict[str, str]:
    """Each parameter the owner (and the owners it wraps) reads, with the kind it names."""
    if isinstance(owner, FirstOf):
        out: dict[str, str] = {}
        for inner in owner.owners:
            out.update(named(inner))
        return out
    if isinstance(owner, When):
        return {owner.param: "flag"} | named(owner.owner)
    param = getattr(owner, "param", None)
    return {param: kind_of(owner)} if param else {}


def chosen(owner: Owner, args: Mapping[str, Any]) -> Owner:
    """The owner that decides for ``args`` (``FirstOf``'s first given, through ``When``)."""
    if isinstance(owner, FirstOf):
        return chosen(next(o for o in owner.owners if o.given(args)), args)
    if isinstance(owner, When):
        return chosen(owner.owner, args)
    return owner


def value(world: World, kind: str, *, unknown: bool = False) -> Any:
    """The world's thing of ``kind``; with ``unknown`` (or where it has none), a sibling in its
    tenant's namespace that is no thing."""
    if kind == "flag":
        return False
    tenant = world.tenant
    known: dict[str, Any] = {
        "run": world.run_id,
        "task": world.task_id,
        "work_order": world.work_order_id,
        "message": world.message_id,
        "job": world.job_id,
        "approval": world.approval_id,
        "workstream": world.workstream_id,
        "workstream_run": world.workstream_run_id,
        "tenant": tenant,
        "document": world.document,
    }
    missing = {
        "run": f"{world.task_id}:20990101T000000Z",
        "task": f"{tenant}.no-such-task",
        "work_order": "wo-0000000000000000",
        "message": "00000000-0000-4000-8000-000000000000",
        "job": "000000000000",
        "approval": "apr-000000000000",
        "workstream": f"{tenant}-no-such-workstream",
        "workstream_run": f"{tenant}-ledger:manual-none",
        "tenant": tenant,  # not an object: the same either way
        "document": world.document,
    }
    return missing[kind] if unknown or known[kind] is None else known[kind]


@dataclass(frozen=True)
class Expected:
    """What a caller must be answered: ``hidden`` (as unknown: 404, exit 4), ``refused`` (403,
    exit 7), or ``allowed`` (anything but those, and nothing of acme's shown)."""

    verdict: str
    kind: str


def expected(owner: Owner, args: Mapping[str, Any], caller: str) -> Expected:
    """``caller``: ``other`` (a tenant that is not acme), ``nobody`` or ``admin``."""
    decider = chosen(owner, args)
    kind = kind_of(decider)
    if caller == "admin" or kind == "public":
        return Expected("allowed", kind)
    if kind in OBJECT_KINDS:
        return Expected("hidden", kind)
    if kind == "listing" and caller == "other":
        return Expected("allowed", kind)
    if kind == "tenant" and caller == "other" and arg(args, getattr(decider, "param", "")) is None:
        return Expected("allowed", kind)
    return Expected("refused", kind)


def leaks(text: str, world: World, sent: str) -> list[str]:
    """acme's identifiers in ``text`` that the request (``sent``) did not carry itself."""
    return [s for s in world.secrets if s in text and s not in sent]


# --------------------------------------------------------------------------- requests from the route table
FIELD_VALUES: dict[str, Any] = {
    "reason": "tenancy test",
    "severity": "high",
    "resolution": "fixed",
    "changes": {"max_attempts": 5},
    "token": "a-completion-token",
    "max_holders": 2,
    "since": "7d",
    "step": "extract",
    "need": "extract",
    "name": "default",
    "resource": "shared-warehouse",
    "target": "sim:acme",
    "on": False,
}
"""Values for the parameters no rule reads, by name (a reason, a severity...)."""
NAME_KINDS = {
    "run_id": "run",
    "task_id": "task",
    "work_order_id": "work_order",
    "message_id": "message",
    "job_id": "job",
    "workstream_id": "workstream",
    "ref": "workstream",
}
"""What a path parameter no rule reads names, by its name: so that a route whose rule forgot its
object is still called with acme's, and fails on what it shows."""


@functools.cache
def api_document() -> dict[str, Any]:
    """The ops API's OpenAPI document, built once: it depends on the route table alone, and takes
    about a second to generate. Read it, never change it."""
    return openapi_document(build_app(lambda: None))


@functools.cache
def routes() -> list[tuple[str, str, dict[str, Any]]]:
    """(method, path as the OpenAPI document writes it, its operation) of every route."""
    document = api_document()
    return [
        (method.upper(), path, operation)
        for path, operations in sorted(document["paths"].items())
        for method, operation in sorted(operations.items())
    ]


def registered(path: str) -> str:
    return path.replace("{", "<").replace("}", ">")


def schema_of(document: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with its ``$ref`` (or a nullable ``anyOf``'s) resolved."""
    if "anyOf" in schema:
        schema = next(s for s in schema["anyOf"] if s.get("type") != "null")
    if "$ref" in schema:
        schema = document["components"]["schemas"][schema["$ref"].rpartition("/")[2]]
    return schema


def body_of(
    document: dict[str, Any], operation: dict[str, Any], reads: dict[str, str], world: World, unknown: bool
) -> dict[str, Any] | None:
    """A valid body: the fields the rule reads hold acme's things, the other required ones a
    value by name (or their enum's first)."""
    content = operation.get("requestBody", {}).get("content", {}).get("application/json")
    if content is None:
        return None
    schema = schema_of(document, content["schema"])
    body: dict[str, Any] = {}
    for name, field in schema.get("properties", {}).items():
        read = reads.get(f"body.{name}")
        if read is not None:
            if read != "flag":
                body[name] = value(world, read, unknown=unknown)
        elif name in schema.get("required", []):
            field = schema_of(document, field)
            body[name] = FIELD_VALUES.get(name, (field.get("enum") or ["x"])[0])
    return body


def request_of(
    document: dict[str, Any], path: str, operation: dict[str, Any], rule: Rule, world: World, unknown: bool
) -> tuple[str, dict[str, Any] | None, dict[str, str], dict[str, Any]]:
    """(concrete path, body, query, the arguments as the rule reads them)."""
    reads = named(rule.owner)
    args: dict[str, Any] = {}
    query: dict[str, str] = {}
    for parameter in operation.get("parameters", []):
        name, where = parameter["name"], parameter["in"]
        kind = reads.get(name)
        if kind is not None:
            given = value(world, kind, unknown=unknown)
        elif where == "path":
            given = value(world, NAME_KINDS[name]) if name in NAME_KINDS else FIELD_VALUES[name]
        elif name == "state" and path == "/runs":
            given = "dead_lettered"  # the route lists by task or by state
        else:
            continue
        args[name] = given
        if where == "path":
            path = path.replace("{" + name + "}", str(given))
        else:
            query[name] = str(given)
    body = body_of(document, operation, reads, world, unknown)
    if body is not None:
        args["body"] = body
    return path, body, query, args
