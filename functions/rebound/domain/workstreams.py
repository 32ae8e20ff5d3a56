"""Workstreams: tasks that depend on each other, declared next to ``tasks:`` in a task file.

```yaml
workstreams:
  - id: nightly-ledger
    tenant: acme
    schedule: {cron: "0 2 * * *", timezone: Europe/Berlin}   # or event:, or started by hand
    steps:
      - {task: extract}
      - {task: transform, needs: [extract]}
      - {task: load, needs: [transform], resources: [warehouse-write]}
      - {task: report, needs: [load], critical: false}
resources:
  - {id: warehouse-write, max_holders: 1}
```

A step is named by its task. This module holds the definitions and the graph checks that do not
need anything but the definitions (``reference_problems``, ``find_cycle``); the run of a workstream
is ``rebound.domain.workstream_runs``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Annotated, Any

from pydantic import Field, field_validator, model_validator

from rebound.domain import tenancy
from rebound.domain.basics import TASK_ID_PATTERN, Strict, TaskKey, Tenant
from rebound.domain.durations import Seconds
from rebound.domain.schedule_spec import ScheduleSpec
from rebound.domain.task import TaskFile

WorkstreamId = Annotated[str, Field(pattern=TASK_ID_PATTERN, description="[a-z0-9_-], at most 48 characters")]
ResourceId = Annotated[str, Field(pattern=TASK_ID_PATTERN, description="[a-z0-9_-], at most 48 characters")]

DEFAULT_RESOURCE_WAIT_S = 900.0
"""How long a step may wait for its resources before ``resource_exhausted`` is raised."""

ARROW = " → "


class ResourceSpec(Strict):
    """Something only ``max_holders`` steps may hold at once (a warehouse's write lock, a licence)."""

    id: ResourceId
    max_holders: int = Field(default=1, ge=1, le=10_000)
    description: str = ""


class WorkstreamStep(Strict):
    task: TaskKey
    needs: list[TaskKey] = Field(default_factory=list, description="steps that must succeed first")
    resources: list[ResourceId] = Field(default_factory=list, description="resources held while it runs")
    critical: bool = Field(default=True, description="false: its failure does not fail the workstream")
    task_key: TaskKey | None = Field(
        default=None,
        description="the key of the task the step runs (<tenant>.<id>); set by the loader from the "
        "workstream's tenant, so a file names steps by their short ids",
    )

    @property
    def task_id(self) -> str:
        """The task the step runs: its key as the loader found it, else its name."""
        return self.task_key or self.task

    @field_validator("needs", "resources")
    @classmethod
    def _no_repeats(cls, value: list[str]) -> list[str]:
        repeated = sorted({v for v in value if value.count(v) > 1})
        if repeated:
            raise ValueError(f"listed more than once: {', '.join(repeated)}")
        return value


class Workstream(Strict):
    """A graph of steps; a step starts when every step it needs has succeeded."""

    id: WorkstreamId
    tenant: Tenant
    description: str = ""
    schedule: ScheduleSpec | None = None
    event: dict[str, Any] | None = Field(default=None, description="an EventBridge pattern that starts it")
    steps: list[WorkstreamStep] = Field(min_length=1, max_length=500)
    resource_wait: Annotated[Seconds, Field(gt=0, le=7 * 86400)] = Field(
        default=DEFAULT_RESOURCE_WAIT_S,
        description="a step waiting longer than this for its resources raises workstream.resource_exhausted",
    )

    @model_validator(mode="after")
    def _one_trigger(self) -> Workstream:
        if self.schedule is not None and self.event is not None:
            raise ValueError("give schedule or event, not both (or neither, to start it by hand)")
        return self

    def step(self, name: str) -> WorkstreamStep:
        for step in self.steps:
            if step.task == name:
                return step
        raise KeyError(name)

    @property
    def graph(self) -> dict[str, list[str]]:
        """Each step and the steps it needs."""
        return {step.task: list(step.needs) for step in self.steps}


class TaskDocument(TaskFile):
    """A task file with its workstreams and resources (cross-references are checked by the loader,
    ``rebound.config.loader.parse_task_document``, which knows the file and the key path)."""

    workstreams: list[Workstream] = Field(default_factory=list)
    resources: list[ResourceSpec] = Field(default_factory=list)


def find_cycle(graph: Mapping[str, Sequence[str]]) -> list[str] | None:
    """A cycle of ``graph`` (node -> the nodes it needs) as a path that ends where it starts
    (``[extract, transform, extract]``), or ``None`` when it has none. Edges to nodes that are not
    keys are ignored (they are reported as unknown elsewhere). Iterative, so deep graphs are fine."""
    white, grey, black = 0, 1, 2
    colour = dict.fromkeys(graph, white)
    for root in graph:
        if colour[root] != white:
            continue
        colour[root] = grey
        path = [root]
        stack = [iter(graph[root])]
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                colour[path.pop()] = black
                stack.pop()
                continue
            if nxt not in colour:
                continue
            if colour[nxt] == grey:
                return [*path[path.index(nxt) :], nxt]
            if colour[nxt] == white:
                colour[nxt] = grey
                path.append(nxt)
                stack.append(iter(graph[nxt]))
    return None


def cycle_text(cycle: Sequence[str]) -> str:
    """A cycle's path by the steps' short ids (every step of a workstream is of its tenant)."""
    return ARROW.join(tenancy.short_id(step) for step in cycle)


def task_key(ws: Workstream, step: str, tasks: Mapping[str, str]) -> str:
    """The key of the task step ``step`` of ``ws`` runs: its tenant's ``<tenant>.<step>``, or the
    bare id of a task stored before tenancy."""
    qualified = tenancy.qualify(ws.tenant, step)
    return qualified if qualified in tasks or step not in tasks else step


def foreign_step(ws: Workstream, step: str) -> str | None:
    """Why ``ws`` may not run ``step``: a task key of another tenant (a workstream runs its own
    tenant's tasks only); ``None`` when it may."""
    named = tenancy.tenant_of(step)
    if named is None or named == ws.tenant:
        return None
    return (
        f"task {step!r} belongs to tenant {named!r}; workstream {ws.id!r} of tenant {ws.tenant!r} "
        f"may run only its own tenant's tasks (write the short id of a task of {ws.tenant!r})"
    )


def reference_problems(
    workstreams: Sequence[Workstream],
    resources: Sequence[ResourceSpec],
    tasks: Mapping[str, str],
) -> list[tuple[tuple[int | str, ...], str]]:
    """Everything wrong between the workstreams, the resources and the tasks (task id -> tenant),
    each with its key path: unknown tasks and resources, a step listed twice, a need that is not a
    step, a task of another tenant, a cycle. Empty when the definitions can be registered."""
    problems: list[tuple[tuple[int | str, ...], str]] = []
    seen_resources: set[str] = set()
    for r_index, resource in enumerate(resources):
        if resource.id in seen_resources:
            problems.append((("resources", r_index, "id"), f"resource {resource.id!r} is declared twice"))
        seen_resources.add(resource.id)
    seen_ids: set[str] = set()
    for w_index, ws in enumerate(workstreams):
        where: tuple[int | str, ...] = ("workstreams", w_index)
        if ws.id in seen_ids:
            problems.append(((*where, "id"), f"workstream id {ws.id!r} appears more than once"))
        seen_ids.add(ws.id)
        names = [step.task for step in ws.steps]
        for s_index, step in enumerate(ws.steps):
            at = (*where, "steps", s_index)
            short = tenancy.short_id(step.task)
            if names.index(step.task) != s_index:
                problems.append(
                    (
                        (*at, "task"),
                        f"step {short!r} is listed twice (first as steps[{names.index(step.task)}])",
                    )
                )
            key = task_key(ws, step.task, tasks)
            owners = sorted({tenant for k, tenant in tasks.items() if tenancy.short_id(k) == short})
            named = tenancy.tenant_of(step.task)
            if named is not None and named != ws.tenant:
                problems.append(((*at, "task"), str(foreign_step(ws, step.task))))
            elif key in tasks and tasks[key] == ws.tenant:
                pass
            elif owners and ws.tenant not in owners:
                problems.append(
                    ((*at, "task"), f"task {short!r} belongs to tenant {owners[0]!r}, not {ws.tenant!r}")
                )
            elif key not in tasks:
                problems.append(((*at, "task"), f"unknown task {short!r}; declare it under tasks:"))
            for n_index, need in enumerate(step.needs):
                if need == step.task:
                    problems.append(((*at, "needs", n_index), f"step {short!r} needs itself"))
                elif need not in names:
                    problems.append(
                        (
                            (*at, "needs", n_index),
                            f"needs {tenancy.short_id(need)!r}, which is not a step of workstream {ws.id!r}",
                        )
                    )
            for r_index, resource_id in enumerate(step.resources):
                if resource_id not in seen_resources:
                    problems.append(
                        (
                            (*at, "resources", r_index),
                            f"unknown resource {resource_id!r}; declare it under resources:",
                        )
                    )
        cycle = find_cycle(ws.graph)
        if cycle is not None:
            problems.append(((*where, "steps"), f"dependency cycle: {cycle_text(cycle)}"))
    return problems


def descendants(graph: Mapping[str, Iterable[str]], start: str) -> set[str]:
    """``start`` and every step that needs it, directly or not."""
    dependents: dict[str, set[str]] = {name: set() for name in graph}
    for name, needs in graph.items():
        for need in needs:
            dependents.setdefault(need, set()).add(name)
    out = {start}
    todo = [start]
    while todo:
        for dependent in dependents.get(todo.pop(), ()):
            if dependent not in out:
                out.add(dependent)
                todo.append(dependent)
    return out


def ancestors(graph: Mapping[str, Iterable[str]], start: str) -> set[str]:
    """Every step ``start`` needs, directly or not (not ``start`` itself)."""
    out: set[str] = set()
    todo = list(graph.get(start, ()))
    while todo:
        name = todo.pop()
        if name not in out:
            out.add(name)
            todo.extend(graph.get(name, ()))
    return out
