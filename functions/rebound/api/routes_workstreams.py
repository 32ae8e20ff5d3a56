"""Routes over workstreams and resources: the operations of ``rebound workstreams`` and
``rebound resources`` (``rebound.ops.workstreams``), each audited with the caller as actor."""

from __future__ import annotations

from typing import Annotated, Any

from aws_lambda_powertools.event_handler.openapi.params import Query
from pydantic import BaseModel, Field

from rebound.api.app import Api
from rebound.domain import workstream_runs as wr
from rebound.engine.workstreams import RECENT_RUNS
from rebound.ops.authz import Environment, Rule, WorkstreamOf, rule
from rebound.ops.workstreams import OUTPUTS, WorkstreamOps, progress_view, render, run_view


class Start(BaseModel):
    token: str | None = Field(default=None, max_length=200, description="the same token names the same run")


class Resume(BaseModel):
    from_step: str | None = Field(default=None, description="run this step and every step after it again")


class Rollback(BaseModel):
    to: int | None = Field(
        default=None, ge=1, description="checkpoint version (default: the one before the latest)"
    )


class StepChange(BaseModel):
    reason: str = Field(min_length=1, max_length=500, description="why (kept in the audit trail)")


class Limit(BaseModel):
    max_holders: int = Field(ge=1, le=10_000)


def register(api: Api) -> None:
    def ops() -> WorkstreamOps:
        """The operations, as the caller the route's rule let through."""
        return WorkstreamOps(api.deps(), api.caller.actor, api.gate())

    def changed(result: tuple[wr.WorkstreamRun, wr.Progress]) -> dict[str, Any]:
        return progress_view(*result)

    def on_run(action: str) -> Rule:
        return Rule(action, WorkstreamOf("run_id", kind="run"))

    @api.get("/workstreams", rule("workstreams:read"), summary="Workstreams and their last run's state")
    def list_workstreams() -> list[dict[str, Any]]:
        return [row for row in ops().overview() if api.sees(row["tenant"])]

    @api.get(
        "/workstreams/<ref>",
        Rule("workstreams:read", WorkstreamOf("ref")),
        summary="A workstream run (or a workstream's latest run) with its graph",
    )
    def show_workstream(
        ref: str, graph: Annotated[str, Query(description=f"graph format: {', '.join(OUTPUTS)}")] = "text"
    ) -> dict[str, Any]:
        run = ops().show(ref)
        return {**run_view(run), "graph": render(run, graph)}

    @api.get(
        "/workstreams/<workstream_id>/runs",
        Rule("workstreams:read", WorkstreamOf("workstream_id", kind="workstream")),
        summary="A workstream's recent runs, latest first",
    )
    def list_runs(
        workstream_id: str,
        limit: Annotated[int, Query(ge=1, le=RECENT_RUNS, description="at most this many")] = 20,
    ) -> list[dict[str, Any]]:
        """Its latest runs (the workstream keeps the ids of its last ``RECENT_RUNS``), each read by key."""
        reader = ops()
        return [run_view(reader.show(run_id)) for run_id in reader.runs(workstream_id)[:limit]]

    @api.post(
        "/workstreams/<workstream_id>/run",
        Rule("workstreams:run", WorkstreamOf("workstream_id", kind="workstream")),
        summary="Start a run of a workstream",
    )
    def start(workstream_id: str, body: Start | None = None) -> dict[str, Any]:
        return run_view(ops().run(workstream_id, (body or Start()).token))

    @api.get(
        "/workstream-runs/<run_id>/checkpoints",
        on_run("workstreams:read"),
        summary="A workstream run's checkpoints (the last 100)",
    )
    def checkpoints(run_id: str) -> list[dict[str, Any]]:
        return [c.model_dump(mode="json") for c in ops().checkpoints(run_id)]

    @api.post(
        "/workstream-runs/<run_id>/retry",
        on_run("workstreams:retry"),
        summary="Retry the whole workstream (a new run)",
    )
    def retry(run_id: str) -> dict[str, Any]:
        return run_view(ops().retry(run_id))

    @api.post(
        "/workstream-runs/<run_id>/retry-failed",
        on_run("workstreams:retry"),
        summary="Run the failed steps again",
    )
    def retry_failed(run_id: str) -> dict[str, Any]:
        return changed(ops().retry_failed(run_id))

    @api.post(
        "/workstream-runs/<run_id>/resume",
        on_run("workstreams:resume"),
        summary="Resume, optionally from a step",
    )
    def resume(run_id: str, body: Resume | None = None) -> dict[str, Any]:
        return changed(ops().resume(run_id, (body or Resume()).from_step))

    @api.post(
        "/workstream-runs/<run_id>/rollback",
        on_run("workstreams:rollback"),
        summary="Roll back to a checkpoint (completed steps stay)",
    )
    def rollback(run_id: str, body: Rollback | None = None) -> dict[str, Any]:
        return changed(ops().rollback(run_id, (body or Rollback()).to))

    @api.post(
        "/workstream-runs/<run_id>/steps/<step>/skip",
        on_run("workstreams:skip"),
        summary="Mark a step completed, with a reason",
    )
    def skip(run_id: str, step: str, body: StepChange) -> dict[str, Any]:
        return changed(ops().skip(run_id, step, body.reason))

    @api.post(
        "/workstream-runs/<run_id>/steps/<step>/cancel",
        on_run("workstreams:cancel"),
        summary="Cancel a step; its dependents stop needing it",
    )
    def cancel(run_id: str, step: str, body: StepChange) -> dict[str, Any]:
        return changed(ops().cancel_step(run_id, step, body.reason))

    @api.delete(
        "/workstream-runs/<run_id>/steps/<step>/needs/<need>",
        on_run("workstreams:edit"),
        summary="Remove a dependency in this run",
    )
    def remove_dependency(run_id: str, step: str, need: str) -> dict[str, Any]:
        return changed(ops().remove_dependency(run_id, step, need))

    @api.get("/resources", rule("resources:read"), summary="Resources, their limits and holders")
    def list_resources() -> list[dict[str, Any]]:
        return ops().resources()

    @api.put(
        "/resources/<resource>",
        Rule("resources:write", Environment()),
        summary="Change a resource's max_holders",
    )
    def set_limit(resource: str, body: Limit) -> dict[str, int]:
        return ops().set_limit(resource, body.max_holders)
