"""Routes for the retry budgets per target (``rebound.ops.targets``): which targets Rebound has
stopped spending attempts on, and for one of them its held runs and history. Read only: the
sweeper alone probes, releases and closes."""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import unquote

from aws_lambda_powertools.event_handler.openapi.params import Path, Query

from rebound.api.app import Api
from rebound.ops.authz import rule
from rebound.ops.targets import HELD_AT_MOST, TargetsOps

NAMED = "http:<host>, lambda:<function> or sim:<name>"


def register(api: Api) -> None:
    @api.get(
        "/targets",
        rule("targets:read"),
        summary="Targets that are unhealthy or recovering, with their held runs and probes",
    )
    def targets() -> list[dict[str, Any]]:
        return [t.as_dict() for t in TargetsOps(api.deps()).listing()]

    @api.get(
        "/targets/<target>",
        rule("targets:read"),
        summary="One target's retry budget: its state, held runs and history",
    )
    def target(
        target: Annotated[
            str, Path(max_length=200, description="http:<host>, lambda:<function> or sim:<name>")
        ],
        at_most: Annotated[int, Query(ge=1, le=1000, description="held runs to list at most")] = HELD_AT_MOST,
    ) -> dict[str, Any]:
        return TargetsOps(api.deps()).show(unquote(target), at_most=at_most).as_dict()
