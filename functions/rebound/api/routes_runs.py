"""Routes over runs: list (by task or by state: an index query, never a scan), show with the whole
timeline, retry with overrides, skip and cancel with a reason, retry the dead-lettered runs of a
filter; and the seeds' ``POST /internal/tasks/retry``."""

from __future__ import annotations

import json
from typing import Annotated, Any

from aws_lambda_powertools.event_handler import Response, content_types
from aws_lambda_powertools.event_handler.openapi.params import Query
from pydantic import BaseModel, Field, model_validator

from rebound.api.app import Api
from rebound.domain.basics import MAX_TASK_TIMEOUT_S, TaskKey
from rebound.domain.errors import ValidationFailed
from rebound.domain.run import Run, RunState
from rebound.domain.tenancy import ALL_TENANTS, tenant_of
from rebound.ops.authz import FirstOf, Listing, Rule, RunOf, rule
from rebound.ops.common import parse_when
from rebound.ops.runs import RunOps, run_view

MAX_PAGE = 500


class Retry(BaseModel):
    timeout_s: int | None = Field(
        default=None, ge=1, le=MAX_TASK_TIMEOUT_S, description="this replay's attempt timeout"
    )
    max_attempts: int | None = Field(default=None, ge=1, le=100, description="attempts in the fresh budget")
    reason: str = Field(default="", max_length=500)


class Close(BaseModel):
    reason: str = Field(min_length=1, max_length=500, description="why (kept in the audit trail)")


RunId = Annotated[str, Field(min_length=1, max_length=200)]


class RetryFailed(BaseModel):
    task_id: TaskKey | None = None
    since: str | None = Field(default=None, description="an ISO 8601 instant or a duration ago (2h, 7d)")
    reason: str = Field(default="", max_length=500)


class InternalRetry(BaseModel):
    """The seeds' retry: one run by id, or the dead-lettered runs of a filter."""

    run_id: RunId | None = None
    task_id: TaskKey | None = None
    since: str | None = None
    reason: str = Field(default="", max_length=500)

    @model_validator(mode="after")
    def _one_target(self) -> InternalRetry:
        if self.run_id is None and self.task_id is None and self.since is None:
            raise ValueError("give run_id, or task_id and/or since")
        return self


def _page(runs: list[Run], next_after: str | None) -> Response[str]:
    return Response(
        status_code=200,
        content_type=content_types.APPLICATION_JSON,
        body=json.dumps([run_view(r) for r in runs]),
        headers={"X-Next-After": next_after} if next_after else {},
    )


def register(api: Api) -> None:
    def ops() -> RunOps:
        """The operations, as the caller the route's rule let through."""
        return RunOps(api.deps(), api.caller.actor)

    def on_run(action: str) -> Rule:
        return Rule(action, RunOf("run_id"))

    @api.get(
        "/runs",
        rule("runs:read"),
        summary="List runs of a task (newest first) or in a state (latest change first)",
    )
    def list_runs(
        task_id: Annotated[str | None, Query(description="the task's runs (by schedule time)")] = None,
        state: Annotated[RunState | None, Query(description="runs in this state")] = None,
        since: Annotated[
            str | None,
            Query(description="a task's runs: scheduled at or after; by state: changed at or after"),
        ] = None,
        until: Annotated[str | None, Query(description="a task's runs: scheduled at or before")] = None,
        limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
        after: Annotated[str | None, Query(description="the X-Next-After of the page before")] = None,
    ) -> Response[str]:
        """Runs come a page at a time: when more remain, the ``X-Next-After`` header is the value
        to pass as ``after`` for the next page. A task's runs are its ``by_task_keys`` index and the
        runs of the fires its schedule owed, by schedule time (a new run's first attempt shows once
        it ends or has run 10 s); runs in a
        state (without a task) are the ``by_state`` index, latest change first, ``after`` being a
        cursor (``succeeded`` lists the runs that succeeded after a retry: the index leaves out a
        clean success; ``running`` the runs running for more than 10 s, and every attempt the
        sweeper watches). Neither scans. Only the caller's tenants' runs are listed."""
        if task_id is None and state is None:
            raise ValidationFailed(
                "give task_id or state (listing every run would scan the table)", field="task_id"
            )
        task_id = api.task_key(task_id)
        run_ops = ops()
        now = run_ops.deps.clock.now()
        since_at = parse_when(since, now, option="since") if since else None
        if task_id is None and state is not None:
            if until is not None:
                raise ValidationFailed(
                    "until: runs by state page back from the latest change; bound them with since",
                    field="until",
                )
            found = run_ops.store.runs_in_state_page(state, since=since_at, limit=limit, after=after)
            return _page([r for r in found.runs if api.sees(r.tenant)], found.cursor)
        if task_id is not None and not api.sees(tenant_of(task_id) or ALL_TENANTS):
            return _page([], None)  # another tenant's task lists as one that has no runs
        listed = run_ops.find(
            task_id=task_id,
            state=state,
            since=since_at,
            until=parse_when(until, now, option="until") if until else None,
            limit=limit + 1,
            after=run_ops.get(after) if after else None,
        )
        page = [r for r in listed[:limit] if api.sees(r.tenant)]
        return _page(page, page[-1].run_id if len(listed) > limit and page else None)

    @api.get(
        "/runs/recovery",
        rule("runs:read"),
        summary="Runs by state over the last hour and day, and the retry success rate against its target",
    )
    def recovery(
        at_most: Annotated[int, Query(ge=1, le=100_000, description="count each up to this many")] = 1000,
    ) -> dict[str, Any]:
        """Counting queries on the ``by_state`` index (never a scan), each stopping just past
        ``at_most``: a count above it means "more than ``at_most``". The index leaves out a run
        that succeeded at its first attempt, so successes are counted as
        ``succeeded_after_retry``, and a clean attempt until it has run for 10 s."""
        return ops().recovery(at_most=at_most)

    @api.get("/runs/<run_id>", on_run("runs:read"), summary="A run and its whole timeline")
    def show_run(run_id: str) -> dict[str, Any]:
        return ops().timeline(run_id).as_dict()

    @api.post(
        "/runs/<run_id>/retry",
        on_run("runs:retry"),
        summary="Retry a run now (a dead-lettered run gets a fresh budget)",
    )
    def retry(run_id: str, body: Retry | None = None) -> dict[str, Any]:
        b = body or Retry()
        return (
            ops().retry(run_id, timeout_s=b.timeout_s, max_attempts=b.max_attempts, reason=b.reason).as_dict()
        )

    @api.post("/runs/<run_id>/skip", on_run("runs:skip"), summary="Skip a run (a reason is required)")
    def skip(run_id: str, body: Close) -> dict[str, Any]:
        return run_view(ops().skip(run_id, body.reason))

    @api.post("/runs/<run_id>/cancel", on_run("runs:cancel"), summary="Cancel a run (a reason is required)")
    def cancel(run_id: str, body: Close) -> dict[str, Any]:
        return run_view(ops().cancel(run_id, body.reason))

    def retry_failed(task_id: str | None, since: str | None, reason: str) -> dict[str, Any]:
        task_id = api.task_key(task_id)
        run_ops = ops()
        now = run_ops.deps.clock.now()
        runs = [
            r
            for r in run_ops.failed_runs(
                task_id=task_id, since=parse_when(since, now, option="since") if since else None
            )
            if api.sees(r.tenant)
        ]
        outcomes = run_ops.retry_failed(runs, reason=reason)
        return {"matched": len(runs), "outcomes": [o.as_dict() for o in outcomes]}

    @api.post(
        "/runs/retry-failed",
        rule("runs:retry"),
        summary="Replay the dead-lettered runs of a task and/or since a time",
    )
    def retry_failed_route(body: RetryFailed) -> dict[str, Any]:
        return retry_failed(body.task_id, body.since, body.reason)

    @api.post(
        "/internal/tasks/retry",
        Rule("runs:retry", FirstOf((RunOf("body.run_id"), Listing()))),
        summary="Retry one run, or the dead-lettered runs of a filter",
    )
    def internal_retry(body: InternalRetry) -> dict[str, Any]:
        if body.run_id is not None:
            return {"matched": 1, "outcomes": [ops().retry(body.run_id, reason=body.reason).as_dict()]}
        return retry_failed(body.task_id, body.since, body.reason)
