"""Routes over workstreams and resources: the operations of ``rebound workstreams`` and
``rebound resources`` (``rebound.ops.workstreams``), each audited with the caller as actor."""

from __future__ import annotations

from typing import Annotated, Any

from aws_lambda_powertools.event_handler.openapi.params import Query
from pydantic import BaseModel, Field

from rebound.api.app import Api
from rebound.domain import workstream_runs as wr
from rebound.engine.workstreams import RECENT_RUNS
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
    app = api.app

    def ops(action: str, ref: str | None = None) -> WorkstreamOps:
        """The operations, once the caller may do ``action`` on the tenant of the workstream (run)
        ``ref`` names; with none, lists are filtered to the caller's tenants."""
        if ref is None:
            return WorkstreamOps(api.deps(), api.allow(action).actor)
        tenant = WorkstreamOps(api.deps(), "reader").tenant_of(ref)
        return WorkstreamOps(api.deps(), api.allow(action, tenant).actor)

    def changed(result: tuple[wr.WorkstreamRun, wr.Progress]) -> dict[str, Any]:
        return progress_view(*result)

    @app.get("/workstreams", summary="Workstreams and their last run's state")
    def list_workstreams() -> list[dict[str, Any]]:
        gate = api.gate()
        return [row for row in ops("workstreams:read").overview() if gate.sees(row["tenant"])]

    @app.get("/workstreams/<ref>", summary="A workstream run (or a workstream's latest run) with its graph")
    def show_workstream(
        ref: str, graph: Annotated[str, Query(description=f"graph format: {', '.join(OUTPUTS)}")] = "text"
    ) -> dict[str, Any]:
        run = ops("workstreams:read", ref).show(ref)
        return {**run_view(run), "graph": render(run, graph)}

    @app.get("/workstreams/<workstream_id>/runs", summary="A workstream's recent runs, latest first")
    def list_runs(
        workstream_id: str,
        limit: Annotated[int, Query(ge=1, le=RECENT_RUNS, description="at most this many")] = 20,
    ) -> list[dict[str, Any]]:
        """Its latest runs (the workstream keeps the ids of its last ``RECENT_RUNS``), each read by key."""
        reader = ops("workstreams:read", workstream_id)
        return [run_view(reader.show(run_id)) for run_id in reader.runs(workstream_id)[:limit]]

    @app.post("/workstreams/<workstream_id>/run", summary="Start a run of a workstream")
    def start(workstream_id: str, body: Start | None = None) -> dict[str, Any]:
        return run_view(ops("workstreams:run", workstream_id).run(workstream_id, (body or Start()).token))

    @app.get("/workstream-runs/<run_id>/checkpoints", summary="A workstream run's checkpoints (the last 100)")
    def checkpoints(run_id: str) -> list[dict[str, Any]]:
        return [c.model_dump(mode="json") for c in ops("workstreams:read", run_id).checkpoints(run_id)]

    @app.post("/workstream-runs/<run_id>/retry", summary="Retry the whole workstream (a new run)")
    def retry(run_id: str) -> dict[str, Any]:
        return run_view(ops("workstreams:retry", run_id).retry(run_id))

    @app.post("/workstream-runs/<run_id>/retry-failed", summary="Run the failed steps again")
    def retry_failed(run_id: str) -> dict[str, Any]:
        return changed(ops("workstreams:retry", run_id).retry_failed(run_id))

    @app.post("/workstream-runs/<run_id>/resume", summary="Resume, optionally from a step")
    def resume(run_id: str, body: Resume | None = None) -> dict[str, Any]:
        return changed(ops("workstreams:resume", run_id).resume(run_id, (body or Resume()).from_step))

    @app.post(
        "/workstream-runs/<run_id>/rollback", summary="Roll back to a checkpoint (completed steps stay)"
    )
    def rollback(run_id: str, body: Rollback | None = None) -> dict[str, Any]:
        return changed(ops("workstreams:rollback", run_id).rollback(run_id, (body or Rollback()).to))

    @app.post("/workstream-runs/<run_id>/steps/<step>/skip", summary="Mark a step completed, with a reason")
    def skip(run_id: str, step: str, body: StepChange) -> dict[str, Any]:
        return changed(ops("workstreams:skip", run_id).skip(run_id, step, body.reason))

    @app.post(
        "/workstream-runs/<run_id>/steps/<step>/cancel",
        summary="Cancel a step; its dependents stop needing it",
    )
    def cancel(run_id: str, step: str, body: StepChange) -> dict[str, Any]:
        return changed(ops("workstreams:cancel", run_id).cancel_step(run_id, step, body.reason))

    @app.delete(
        "/workstream-runs/<run_id>/steps/<step>/needs/<need>", summary="Remove a dependency in this run"
    )
    def remove_dependency(run_id: str, step: str, need: str) -> dict[str, Any]:
        return changed(ops("workstreams:edit", run_id).remove_dependency(run_id, step, need))

    @app.get("/resources", summary="Resources, their limits and holders")
    def list_resources() -> list[dict[str, Any]]:
        return ops("resources:read").resources()

    @app.put("/resources/<resource>", summary="Change a resource's max_holders")
    def set_limit(resource: str, body: Limit) -> dict[str, int]:
        return ops("resources:write").set_limit(resource, body.max_holders)
