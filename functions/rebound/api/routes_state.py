"""Routes over the items' agreement with their audit chains: ``rebound state check|repair`` and
``rebound runs restore`` (``rebound.ops.state``), each repair audited with the caller as actor.

One invocation lives at most 29 s (API Gateway's limit), so a pass over the tables stops at the
first page boundary after ``BUDGET_S`` and answers ``next``: the caller asks again with
``after: next`` until it is ``null``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, Field

from rebound.api.app import Api
from rebound.ops.authz import Environment, Rule, RunOf
from rebound.ops.state import StateOps, restore_missing

BUDGET_S = 20.0
"""How long one request's pass reads before it stops at a page boundary and answers ``next``."""


class Check(BaseModel):
    after: str | None = Field(default=None, max_length=400, description="the `next` of the answer before")


class Repair(Check):
    dry_run: bool = Field(default=False, description="say what would be repaired; write nothing")
    reason: str = Field(default="", max_length=500, description="why (kept in each repair's audit record)")


class Restore(BaseModel):
    dry_run: bool = False
    reason: str = Field(default="", max_length=500)


def _budget() -> Callable[[], bool]:
    deadline = time.monotonic() + BUDGET_S
    return lambda: time.monotonic() > deadline


def register(api: Api) -> None:
    def ops() -> StateOps:
        return StateOps(api.deps(), api.caller.actor)

    @api.post(
        "/state/check",
        Rule("state:check", Environment()),
        summary="Every item against its audit chain (writes nothing)",
    )
    def check(body: Check | None = None) -> dict[str, Any]:
        b = body or Check()
        return ops().check(after=b.after, stop=_budget()).as_dict()

    @api.post(
        "/state/repair",
        Rule("state:repair", Environment()),
        summary="Write the items that differ from their audit chains back as they say",
    )
    def repair(body: Repair | None = None) -> dict[str, Any]:
        b = body or Repair()
        return ops().repair(dry_run=b.dry_run, reason=b.reason, after=b.after, stop=_budget()).as_dict()

    @api.post(
        "/runs/<run_id>/restore",
        Rule("runs:restore", RunOf("run_id", missing=restore_missing)),
        summary="Write a run back as its audit chain says",
    )
    def restore(run_id: str, body: Restore | None = None) -> dict[str, Any]:
        b = body or Restore()
        return ops().restore_run(run_id, dry_run=b.dry_run, reason=b.reason).as_dict()
