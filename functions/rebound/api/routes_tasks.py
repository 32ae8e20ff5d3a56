"""Routes over tasks: register from a task document (diff and dry run), list, show, pause, resume,
run now, preview; and the seeds' ``/internal/tasks/...`` paths, which are the same operations."""

from __future__ import annotations

from typing import Annotated, Any

from aws_lambda_powertools.event_handler.openapi.params import Query
from pydantic import BaseModel, Field

from rebound.api.app import Api
from rebound.config.loader import parse_task_document
from rebound.domain.task import TaskState
from rebound.ops.authz import Documents, Rule, TaskOf, document_tenants, rule
from rebound.ops.preview import MAX_PREVIEW
from rebound.ops.task_views import detail_view, task_view
from rebound.ops.tasks import Change, TaskOps, change_view


class Register(BaseModel):
    document: dict[str, Any] = Field(description="a task document as a task file holds it (tasks, tenants)")
    dry_run: bool = Field(default=False, description="plan only: the diff, nothing written")
    allow_past: bool = Field(
        default=False, description="accept a one-time `at` already past (the task fires at once)"
    )


class StateChange(BaseModel):
    reason: str = Field(default="", max_length=500)


class RunNow(BaseModel):
    token: str | None = Field(default=None, max_length=64, description="idempotency token")


def register(api: Api) -> None:
    def ops() -> TaskOps:
        """The operations, as the caller the route's rule let through (which they check again on
        each task's tenant)."""
        gate = api.gate()
        return TaskOps(api.deps(), gate.caller.actor, guard=gate)

    def on_task(action: str) -> Rule:
        return Rule(action, TaskOf("task_id"))

    def register_tasks(body: Register) -> dict[str, Any]:
        task_ops = ops()
        document = parse_task_document(body.document, "request body", api.deps().policies.book)
        changes = task_ops.plan(document.tasks, allow_past=body.allow_past)
        plan = [change_view(c) for c in changes]
        if body.dry_run or not changes:
            return {"dry_run": body.dry_run, "plan": plan, "applied": None}
        result = task_ops.apply(changes)
        tenants = task_ops.apply_tenants(document.tenants)
        todo = sum(c.change is not Change.UNCHANGED for c in changes)
        return {
            "dry_run": False,
            "plan": plan,
            "applied": {**result.as_dict(), "tenants": tenants},
            "changed": todo,
        }

    registering = Rule("tasks:register", Documents("body.document", document_tenants))
    api.post("/tasks", registering, summary="Register or update tasks from a task document")(register_tasks)
    api.post("/internal/tasks/register", registering, summary="Register tasks (the seeds' path)")(
        register_tasks
    )

    @api.get("/tasks", rule("tasks:read"), summary="List tasks")
    def list_tasks(
        tenant: Annotated[str | None, Query(description="only this tenant's tasks")] = None,
        state: Annotated[TaskState | None, Query(description="active or paused")] = None,
    ) -> list[dict[str, Any]]:
        return [task_view(s) for s in ops().find(tenant=tenant, state=state)]

    @api.get(
        "/tasks/<task_id>",
        on_task("tasks:read"),
        summary="A task with its schedules (and why a Unix cron became several), next fires and recent runs",
    )
    def show_task(task_id: str) -> dict[str, Any]:
        return detail_view(ops().show(task_id))

    def pause(task_id: str, body: StateChange | None = None) -> dict[str, Any]:
        task_ops = ops()
        return task_view(task_ops.set_state(task_id, TaskState.PAUSED, (body or StateChange()).reason))

    def resume(task_id: str, body: StateChange | None = None) -> dict[str, Any]:
        task_ops = ops()
        return task_view(task_ops.set_state(task_id, TaskState.ACTIVE, (body or StateChange()).reason))

    for prefix in ("", "/internal"):
        api.put(f"{prefix}/tasks/<task_id>/pause", on_task("tasks:pause"), summary="Pause a task")(pause)
        api.put(f"{prefix}/tasks/<task_id>/resume", on_task("tasks:resume"), summary="Resume a task")(resume)

    @api.post("/tasks/<task_id>/run", on_task("tasks:run"), summary="Run a task now (a manual run)")
    def run_now(task_id: str, body: RunNow | None = None) -> dict[str, Any]:
        run_id = ops().run_now(task_id, (body or RunNow()).token)
        return {"task_id": run_id.partition(":")[0], "run_id": run_id}

    @api.get("/tasks/<task_id>/preview", on_task("tasks:read"), summary="The task's next fire times")
    def preview(
        task_id: str, count: Annotated[int, Query(ge=1, le=MAX_PREVIEW, description="how many fires")] = 5
    ) -> list[dict[str, Any]]:
        return [f.as_dict() for f in ops().preview(task_id, count)]
