"""Operating workstreams: register, list, show (with the graph as text, DOT or Mermaid), run,
retry, retry the failed steps, resume from a step, roll back, skip or cancel a step, remove a
dependency, checkpoints, resources. The CLI, the API and the console call these; every change is
audited on the workstream run's chain with the operator as actor (``rebound.engine.workstreams``).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from rebound.config.loader import load_task_document
from rebound.domain import workstream_recovery as recovery
from rebound.domain import workstream_runs as wr
from rebound.domain.errors import Conflict, ValidationFailed
from rebound.domain.flags import TASK_SCHEDULER_V3
from rebound.domain.ids import workstream_rule_name
from rebound.domain.schedules import planned_workstream_schedules, workstream_start_payload
from rebound.domain.target_safety import self_trigger_problem
from rebound.domain.timefmt import iso
from rebound.domain.workstreams import ResourceSpec, Workstream
from rebound.engine.deps import Deps
from rebound.engine.ports import RecurringSchedule
from rebound.engine.workstreams import WorkstreamNotFound, Workstreams
from rebound.ops.access import UNGUARDED, Guard
from rebound.ops.tasks import Change, definition_diff
from rebound.ops.throttle import Backoff

SYMBOL = {
    wr.StepState.PENDING: "·",
    wr.StepState.WAITING: "…",
    wr.StepState.RUNNING: "▶",
    wr.StepState.SUCCEEDED: "✔",
    wr.StepState.SKIPPED: "↷",
    wr.StepState.FAILED: "✖",
    wr.StepState.CANCELLED: "⊘",
    wr.StepState.BLOCKED: "■",
}
COLOUR = {
    wr.StepState.PENDING: "white",
    wr.StepState.WAITING: "khaki",
    wr.StepState.RUNNING: "lightblue",
    wr.StepState.SUCCEEDED: "palegreen",
    wr.StepState.SKIPPED: "lightgrey",
    wr.StepState.FAILED: "salmon",
    wr.StepState.CANCELLED: "grey",
    wr.StepState.BLOCKED: "orange",
}
OUTPUTS = ("text", "dot", "mermaid")


@dataclass(frozen=True)
class DefinitionChange:
    """What registering a workstream or a resource would change."""

    kind: str
    """``workstream`` or ``resource``"""
    id: str
    change: Change
    diff: dict[str, tuple[Any, Any]] = field(default_factory=dict)


def _change(kind: str, ident: str, before: dict[str, Any] | None, after: dict[str, Any]) -> DefinitionChange:
    diff = definition_diff(before, after)
    if before is None:
        return DefinitionChange(kind, ident, Change.CREATE, diff)
    return DefinitionChange(kind, ident, Change.UPDATE if diff else Change.UNCHANGED, diff)


def definition_change_view(change: DefinitionChange) -> dict[str, Any]:
    """A planned change as the CLI's JSON and the API show it (the shape of a task's)."""
    return {
        "kind": change.kind,
        "id": change.id,
        "change": change.change.value,
        "diff": {path: {"from": old, "to": new} for path, (old, new) in change.diff.items()},
    }


def run_view(run: wr.WorkstreamRun) -> dict[str, Any]:
    """A workstream run as the report, the CLI's JSON and the API show it."""
    return {
        "workstream_id": run.workstream_id,
        "run_id": run.run_id,
        "tenant": run.tenant,
        "state": run.state.value,
        "started_at": iso(run.started_at),
        "ended_at": iso(run.ended_at) if run.ended_at else None,
        "reason": run.reason,
        "checkpoint": run.checkpoint_version,
        "steps": [
            {
                "step": s.step,
                "task_id": s.task_id,
                "run_id": s.run_id,
                "state": s.state.value,
                "needs": s.needs,
                "removed_needs": s.removed_needs,
                "resources": s.resources,
                "critical": s.critical,
                "tries": s.tries,
                "started_at": iso(s.started_at) if s.started_at else None,
                "ended_at": iso(s.ended_at) if s.ended_at else None,
                "reason": s.reason,
                "warning": s.warning,
            }
            for s in run.steps
        ],
    }


def progress_view(run: wr.WorkstreamRun, progress: wr.Progress) -> dict[str, Any]:
    return {
        **run_view(run),
        "started_steps": [s.step for s in progress.start],
        "cancelled_runs": progress.cancel,
        "not_rolled_back": progress.not_rolled_back,
        "checkpoint_taken": progress.checkpoint.version if progress.checkpoint else None,
    }


def _levels(graph: Mapping[str, list[str]]) -> dict[str, int]:
    """Each step's depth: 0 for a root, else one more than its deepest need."""
    level: dict[str, int] = {}

    def depth(name: str, seen: frozenset[str]) -> int:
        if name in level:
            return level[name]
        needs = [n for n in graph.get(name, []) if n in graph and n not in seen]
        level[name] = 1 + max((depth(n, seen | {name}) for n in needs), default=-1)
        return level[name]

    for name in graph:
        depth(name, frozenset())
    return level


def render(run: wr.WorkstreamRun, output: str = "text") -> str:
    """The graph with each step's state: ``text`` for a terminal, ``dot`` (Graphviz) or ``mermaid``."""
    graph = run.graph
    if output == "dot":
        lines = [f'digraph "{run.workstream_id}" {{', "  rankdir=LR;", "  node [shape=box, style=filled];"]
        for s in run.steps:
            label = f"{s.step}\\n{s.state.value}" + ("" if s.critical else "\\n(non-critical)")
            lines.append(f'  "{s.step}" [label="{label}", fillcolor={COLOUR[s.state]}];')
        for s in run.steps:
            lines += [f'  "{need}" -> "{s.step}";' for need in s.needs]
            lines += [
                f'  "{need}" -> "{s.step}" [style=dashed, label="removed"];' for need in s.removed_needs
            ]
        return "\n".join([*lines, "}"]) + "\n"
    if output == "mermaid":
        lines = ["graph LR"]
        for s in run.steps:
            lines.append(f'  {_mermaid_id(s.step)}["{s.step}: {s.state.value}"]:::{s.state.value}')
        for s in run.steps:
            lines += [f"  {_mermaid_id(need)} --> {_mermaid_id(s.step)}" for need in s.needs]
            lines += [f"  {_mermaid_id(need)} -.-> {_mermaid_id(s.step)}" for need in s.removed_needs]
        lines += [f"  classDef {state.value} fill:{COLOUR[state]}" for state in wr.StepState]
        return "\n".join(lines) + "\n"
    if output != "text":
        raise ValidationFailed(f"unknown output {output!r}; one of {', '.join(OUTPUTS)}", key_path="output")
    level = _levels(graph)
    width = max(len(s.step) for s in run.steps)
    lines = [f"{run.workstream_id}  {run.run_id}  [{run.state.value}]"]
    for depth in range(max(level.values()) + 1):
        for s in (x for x in run.steps if level[x.step] == depth):
            needs = f"  ← {', '.join(s.needs)}" if s.needs else ""
            extra = "" if s.critical else "  (non-critical)"
            why = f"  — {s.reason}" if s.reason else ""
            indent = "  " * (depth + 1)
            lines.append(f"{indent}{SYMBOL[s.state]} {s.step:<{width}} {s.state.value:<9}{needs}{extra}{why}")
    return "\n".join(lines) + "\n"


def _mermaid_id(name: str) -> str:
    return "s_" + name.replace("-", "_")


class WorkstreamOps:
    def __init__(self, deps: Deps, actor: str, guard: Guard = UNGUARDED) -> None:
        self.deps = deps
        self.actor = actor
        self.engine = Workstreams(deps, actor)
        self.guard = guard
        """Asked before a workstream of a tenant or a shared resource's limit is registered."""

    def tenant_of(self, ref: str) -> str:
        """The tenant of the workstream, or of the workstream run, ``ref`` names."""
        if ref in self.engine.ids():
            return self.engine.definition(ref)[0].tenant
        return self.engine.get_run(ref).tenant

    # --------------------------------------------------------------------------- definitions
    def apply(self, path: Path | str) -> dict[str, Any]:
        """Register the workstreams and resources of a task file. Steps may name tasks of the file
        or tasks already registered; everything else is refused with the file and the key path."""
        known = {s.task.id: s.task.tenant for s in self.deps.store.list_tasks()}
        document = load_task_document(path, self.deps.policies.book, known_tasks=known)
        unregistered = sorted({t.id for t in document.tasks} - set(known))
        plan = self.plan(document.workstreams, document.resources)
        return {
            **self.register(document.workstreams, document.resources),
            "plan": [definition_change_view(c) for c in plan],
            "tasks_not_registered": unregistered,
        }

    def plan(self, workstreams: list[Workstream], resources: list[ResourceSpec]) -> list[DefinitionChange]:
        """What registering these definitions would change, with a field-level diff (as
        ``TaskOps.plan`` for tasks); nothing is written. A start the environment cannot carry out
        (a schedule Scheduler cannot express, a pattern that matches Rebound's own events) is
        refused here, naming the workstream and the field."""
        changes: list[DefinitionChange] = []
        for workstream in workstreams:
            self.validate(workstream)
            stored = self._stored(workstream.id)
            before = stored.model_dump(mode="json") if stored is not None else None
            changes.append(_change("workstream", workstream.id, before, workstream.model_dump(mode="json")))
        limits = self.engine.resources()
        for resource in resources:
            before = {"max_holders": limits[resource.id]} if resource.id in limits else None
            changes.append(_change("resource", resource.id, before, {"max_holders": resource.max_holders}))
        return changes

    def register(
        self, workstreams: list[Workstream], resources: list[ResourceSpec], backoff: Backoff | None = None
    ) -> dict[str, Any]:
        """Store the definitions (checked by the loader already) and the resources' limits, then
        each workstream's starts: its schedules (``ws-<id>``, targeting the escalation queue with
        the message that starts a run) and, for ``event:``, its rule on the bus (``ws-<id>``).
        The starts are written after the definition, so a failure part-way leaves a definition
        whose starts the next apply repairs."""
        for workstream in workstreams:
            self.validate(workstream)
        previous = {w.id: self._stored(w.id) for w in workstreams}
        self._check_owners(workstreams, resources, previous)
        changed = self.engine.register(workstreams, resources) if workstreams or resources else []
        backoff = backoff or Backoff()
        schedules = rules = 0
        for workstream in workstreams:
            written = self._write_starts(workstream, previous[workstream.id], backoff)
            schedules += written[0]
            rules += written[1]
        return {
            "workstreams": [w.id for w in workstreams],
            "changed": changed,
            "resources": {r.id: r.max_holders for r in resources},
            "schedules_written": schedules,
            "rules_written": rules,
        }

    def _check_owners(
        self,
        workstreams: list[Workstream],
        resources: list[ResourceSpec],
        previous: Mapping[str, Workstream | None],
    ) -> None:
        """Registering a workstream needs its tenant and never takes another tenant's workstream
        of the same id; a resource's limit is every tenant's, so changing one needs an administrator."""
        for workstream in workstreams:
            self.guard.check("workstreams:register", workstream.tenant)
            stored = previous[workstream.id]
            if stored is not None and stored.tenant != workstream.tenant:
                raise Conflict(
                    f"workstream {workstream.id} belongs to tenant {stored.tenant!r}; a workstream of "
                    f"tenant {workstream.tenant!r} cannot change it (give it another id)",
                    workstream_id=workstream.id,
                    tenant=stored.tenant,
                )
        limits = self.engine.resources()
        if any(limits.get(r.id) != r.max_holders for r in resources):
            self.guard.check("resources:write")

    def validate(self, workstream: Workstream) -> None:
        """Refuse a start the environment cannot carry out, naming the workstream and the field."""
        try:
            planned_workstream_schedules(workstream)
        except ValidationFailed as exc:
            where = str(exc.details.get("key_path") or "schedule")
            raise ValidationFailed(
                f"workstream {workstream.id}: {where}: {exc.message}", key_path=where
            ) from None
        if workstream.event is not None:
            why = self_trigger_problem(workstream.event, self.deps.settings.event_source)
            if why is not None:
                raise ValidationFailed(
                    f"workstream {workstream.id}: event.source: {why}", key_path="event.source"
                )

    def write_starts(self, workstream: Workstream) -> tuple[int, int]:
        """Its stored definition's schedules and rule written again (a flag changed how)."""
        return self._write_starts(workstream, workstream, Backoff())

    def _stored(self, workstream_id: str) -> Workstream | None:
        try:
            return self.engine.definition(workstream_id)[0]
        except WorkstreamNotFound:
            return None

    def _write_starts(
        self, workstream: Workstream, previous: Workstream | None, backoff: Backoff
    ) -> tuple[int, int]:
        """Schedules and rule follow the definition; returns (schedules written, rules written)."""
        settings = self.deps.settings
        queue = settings.queue("escalation").arn
        spec = workstream.schedule
        jitter = spec.jitter_window if spec is not None else None
        # task-scheduler-v3 off: no flexible window, its schedules fire at the exact instant
        window = int(jitter // 60) if jitter and self.deps.flags.enabled(TASK_SCHEDULER_V3) else None
        planned = planned_workstream_schedules(workstream)
        written = 0
        for plan in planned:
            wanted = RecurringSchedule(
                plan.name,
                plan.expression,
                plan.timezone,
                workstream_start_payload(workstream.id),
                window_minutes=window,
                description=f"Rebound workstream {workstream.id}",
                end=spec.end if spec is not None else None,
                queue_arn=queue,
            )
            outcome = backoff.call(lambda wanted=wanted: self.deps.schedules.put_recurring(wanted))  # type: ignore[misc]
            written += outcome != "unchanged"
        keep = {p.name for p in planned}
        for old in planned_workstream_schedules(previous) if previous is not None else []:
            if old.name not in keep:
                backoff.call(lambda name=old.name: self.deps.schedules.delete(name))  # type: ignore[misc]
        name = workstream_rule_name(workstream.id)
        if workstream.event is None:
            if previous is not None and previous.event is not None:
                backoff.call(lambda: self.deps.bus.delete_task_rule(name))
            return written, 0
        event = workstream.event
        outcome = backoff.call(
            lambda: self.deps.bus.put_task_rule(
                name,
                workstream.id,
                json.dumps(event, sort_keys=True),
                queue,
                settings.queue("control_dlq").arn,
                enabled=True,
                description=f"Rebound workstream {workstream.id}",
                starts="workstream",
            )
        )
        return written, int(outcome != "unchanged")

    def overview(self) -> list[dict[str, Any]]:
        rows = []
        for workstream_id in self.engine.ids():
            definition, runs = self.engine.definition(workstream_id)
            last = self.engine.get_run(runs[0]) if runs else None
            rows.append(
                {
                    "workstream_id": workstream_id,
                    "tenant": definition.tenant,
                    "steps": [s.task for s in definition.steps],
                    "trigger": _trigger(definition),
                    "last_run": last.run_id if last else None,
                    "last_state": last.state.value if last else None,
                }
            )
        return rows

    def show(self, ref: str) -> wr.WorkstreamRun:
        """A workstream run by its id, or a workstream's latest run by the workstream's id."""
        if ref in self.engine.ids():
            _, runs = self.engine.definition(ref)
            if not runs:
                raise ValidationFailed(
                    f"workstream {ref} has not run yet; start it with `rebound workstreams run {ref}`"
                )
            ref = runs[0]
        return self.engine.get_run(ref)

    def runs(self, workstream_id: str) -> list[str]:
        return self.engine.definition(workstream_id)[1]

    # --------------------------------------------------------------------------- runs
    def run(self, workstream_id: str, token: str | None = None) -> wr.WorkstreamRun:
        return self.engine.start(workstream_id, token)

    def retry(self, run_id: str) -> wr.WorkstreamRun:
        """Retry the whole workstream: a new run of every step. The old run keeps its states; the
        runs of its failed steps, which the new run's steps take over, are superseded by it."""
        old = self.engine.get_run(run_id)
        new = self.engine.start(old.workstream_id, token=f"retry-{run_id}-{uuid.uuid4().hex}")

        def hand_over(run: wr.WorkstreamRun, books: wr.ResourceBook, at: datetime) -> wr.Progress:
            failed = [s for s in run.steps if s.state is wr.StepState.FAILED and s.run_id is not None]
            return wr.Progress(replaced={str(s.run_id): s.step for s in failed}, replaced_by=new.run_id)

        self.engine.change(
            run_id, hand_over, action="retried-as-new-run", evidence={"new_run": new.run_id}, always=True
        )
        return new

    def retry_failed(self, run_id: str) -> tuple[wr.WorkstreamRun, wr.Progress]:
        return self.engine.change(
            run_id,
            lambda run, books, at: recovery.retry_failed(run, books, at),
            action="retry-failed",
            evidence={},
        )

    def resume(self, run_id: str, from_step: str | None = None) -> tuple[wr.WorkstreamRun, wr.Progress]:
        return self.engine.change(
            run_id,
            lambda run, books, at: recovery.resume(run, books, at, from_step),
            action="resumed",
            evidence={"from_step": from_step},
        )

    def rollback(self, run_id: str, to: int | None = None) -> tuple[wr.WorkstreamRun, wr.Progress]:
        """Roll back to checkpoint ``to`` (default: the latest before the current state)."""
        checkpoints = self.engine.checkpoints(run_id)
        if not checkpoints:
            raise ValidationFailed(f"workstream run {run_id} has no checkpoint to roll back to")
        if to is None:
            target = checkpoints[-2] if len(checkpoints) > 1 else checkpoints[-1]
        else:
            found = [c for c in checkpoints if c.version == to]
            if not found:
                kept = f"{checkpoints[0].version}..{checkpoints[-1].version}"
                raise ValidationFailed(f"no checkpoint {to} of {run_id}; kept: {kept}", key_path="to")
            target = found[0]
        return self.engine.change(
            run_id,
            lambda run, books, at: recovery.rollback(run, target, books, at),
            action="rolled-back",
            evidence={"to_checkpoint": target.version},
        )

    def skip(self, run_id: str, step: str, reason: str) -> tuple[wr.WorkstreamRun, wr.Progress]:
        return self.engine.change(
            run_id,
            lambda run, books, at: recovery.skip_step(run, step, reason, books, at),
            action="step-skipped",
            evidence={"step": step, "reason": reason},
        )

    def cancel_step(self, run_id: str, step: str, reason: str) -> tuple[wr.WorkstreamRun, wr.Progress]:
        if not reason.strip():
            raise ValidationFailed("--reason is required: say why, for the audit trail", key_path="reason")
        return self.engine.change(
            run_id,
            lambda run, books, at: recovery.cancel_step(run, step, reason, books, at),
            action="step-cancelled",
            evidence={"step": step, "reason": reason},
        )

    def remove_dependency(self, run_id: str, step: str, need: str) -> tuple[wr.WorkstreamRun, wr.Progress]:
        return self.engine.change(
            run_id,
            lambda run, books, at: recovery.remove_dependency(run, step, need, books, at),
            action="dependency-removed",
            evidence={"step": step, "need": need},
        )

    def checkpoints(self, run_id: str) -> list[wr.Checkpoint]:
        return self.engine.checkpoints(run_id)

    # --------------------------------------------------------------------------- resources
    def resources(self) -> list[dict[str, Any]]:
        """Each resource, its limit and its holders (``<workstream run>/<step>``): those of the
        caller's tenants by name, the others counted only."""
        tenants: dict[str, str | None] = {}

        def visible(holder: str) -> bool:
            run_id = holder.rpartition("/")[0]
            if run_id not in tenants:
                try:
                    tenants[run_id] = self.engine.get_run(run_id).tenant
                except WorkstreamNotFound:
                    tenants[run_id] = None
            tenant = tenants[run_id]
            return self.guard.sees(tenant) if tenant is not None else self.guard.held().admin

        rows = []
        for name, limit in sorted(self.engine.resources().items()):
            holders = self.engine.resource_holders(name)
            shown = [h for h in holders if visible(h)]
            rows.append(
                {
                    "resource": name,
                    "max_holders": limit,
                    "holders": shown,
                    "other_holders": len(holders) - len(shown),
                }
            )
        return rows

    def set_limit(self, resource: str, max_holders: int) -> dict[str, int]:
        return self.engine.set_limit(resource, max_holders)


def _trigger(definition: Workstream) -> str:
    if definition.schedule is not None:
        return f"schedule {definition.schedule.kind}"
    return "event" if definition.event is not None else "by hand"
