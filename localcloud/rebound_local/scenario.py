"""Scenario files for ``rebound local simulate``: what to run, for how long, and which faults to inject.

```yaml
start: "2026-03-07T00:00:00Z"
duration: 24h
tasks_file: tasks.yaml             # relative to this file; or tasks: [...] inline
task_groups:                       # many similar tasks: {n} in the id is 1..count
  - {count: 90, id: "steady-{n:03d}", tenant: acme, schedule: {cron: "*/5 * * * *"},
     target: {type: sim, behavior: {ok: true}}}
messages:                          # put raw messages on a queue, as any AWS client could
  - {at: 10m, queue: execution, body: "not json"}
workstreams: [...]                 # and resources: [...], exactly as in a task file
operations:                        # what an operator does, and when: to a workstream's latest run,
  - {at: 5m, workstream: nightly, op: start}
  - {at: 2h, workstream: nightly, op: rollback, to: 1}
  - {at: 2h1m, workstream: nightly, op: resume}
  - {at: 3h, workstream: nightly, op: rollback, on_end_of: extract}  # the instant extract's run ends
  - {at: 3h, replay: dead_lettered, task: "billing-*"}   # or to the dead-lettered runs of tasks
  - {at: 3h, redrive: dlq, task: export-1}
  - {at: 3h, skip: dead_lettered, task: "doomed-*", reason: "retired"}   # or cancel: dead_lettered
  - {at: 4h, flag: task-retry-queue, set: "off", reason: "incident"}   # rebound flags set
settle: 2h                         # after the window: at most this long for retries to finish
faults:
  duplicate_delivery: 3
  crash: {points: [after_claim, after_target, before_outcome], rate: 0.05, limit: 10}
  throttle: {"dynamodb:PutItem": 0.2, "scheduler:CreateSchedule": 0.5}
  transaction_conflict: 0.05       # share of transactions and conditional writes cancelled by a conflict
  index_lag: 2s                    # GSI queries see the table as it was this long ago
  receipt_handles: latest_only     # only a message's newest receipt handle deletes it (default: recent)
  handler_timeouts: enforce        # a handler past its Lambda timeout is abandoned (default: off)
  stream_retries: 3                # the outbox stream mapping's MaximumRetryAttempts (default: forever)
model:                             # how long things take (default: instantaneous, no ramps)
  aws_call_ms: 15                  # each DynamoDB/SQS/EventBridge call a handler makes
  invocation_ms: 30                # each warm Lambda invocation, around the handler
  cold_start_ms: 600               # each new concurrent environment's first invocation
  esm_start_concurrency: 5         # SQS event source mappings: 5 batches when a backlog starts,
  esm_scale_per_minute: 300        # then up to 300 more per minute, up to the function's maximum
  scheduler_invocations_per_s: 1000  # EventBridge Scheduler's invocation quota
  concurrency: 4                   # invocations of each function run at once, interleaving AWS calls
  executor_max_concurrency: 2      # the executor's mapping maximum instead of the spec's 100
expect:                            # scenario-specific invariants, judged with the others
  on_time_pct: 99                  # at least this % of scheduled runs start within 60 s
sabotage:                          # test only: break an invariant on purpose
  drop_messages: 1
  tamper_audit_records: 1
  reopen_work_orders: 1
```

Errors name the file and the key path, as every config loader in Rebound does.
"""

from __future__ import annotations

import json
from datetime import datetime
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    field_validator,
    model_validator,
)

from rebound import resources as r
from rebound.config.loader import (
    check_workstreams,
    config_error,
    load_yaml,
    parse_task_document,
    parse_task_file,
)
from rebound.domain.basics import TENANT_PATTERN
from rebound.domain.durations import Seconds
from rebound.domain.errors import ConfigError
from rebound.domain.task import Task, TenantSettings
from rebound.domain.timefmt import UtcDatetime
from rebound.domain.workstreams import ResourceSpec, Workstream
from rebound.engine.crashpoints import CRASH_POINTS
from rebound_local.instrument import LatencyModel


def _known_crash_point(value: str) -> str:
    if value not in CRASH_POINTS:
        raise ValueError(f"unknown crash point {value!r}; the code declares {', '.join(CRASH_POINTS)}")
    return value


CrashPoint = Annotated[str, AfterValidator(_known_crash_point)]
THROTTLE_KEY = r"^[a-z0-9-]+:[A-Z][A-Za-z0-9]+$"
MAX_DURATION_S = 31 * 86400
MAX_INDEX_LAG_S = 3600.0
QUEUE_NAMES = tuple(q.logical for q in r.SPEC.queues)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Crash(_Strict):
    """An invocation dies at these points (``rebound.engine.crashpoints``), with this probability
    each time it reaches one, at most ``limit`` times per point."""

    points: list[CrashPoint] = Field(min_length=1)
    rate: float = Field(ge=0.0, le=1.0)
    limit: int | None = Field(default=None, ge=1, description="at most this many crashes per point")
    limits: dict[CrashPoint, Annotated[int, Field(ge=1)]] = Field(
        default_factory=dict, description="per-point limits, overriding limit for the points named"
    )


class Faults(_Strict):
    duplicate_delivery: int = Field(default=1, ge=1, le=10)
    crash: Crash | None = None
    throttle: dict[Annotated[str, Field(pattern=THROTTLE_KEY)], Annotated[float, Field(ge=0.0, lt=1.0)]] = (
        Field(default_factory=dict)
    )
    transaction_conflict: float = Field(
        default=0.0, ge=0.0, lt=1.0, description="share of transactions and conditional writes cancelled"
    )
    index_lag: Seconds = Field(default=0.0, description="how far behind the table GSI queries see it")
    receipt_handles: Literal["recent", "latest_only"] = "recent"
    handler_timeouts: Literal["off", "enforce"] = "off"
    stream_retries: int | None = Field(
        default=None, ge=0, le=10_000, description="the outbox stream mapping's MaximumRetryAttempts"
    )

    @field_validator("index_lag")
    @classmethod
    def _sane_lag(cls, value: float) -> float:
        if value > MAX_INDEX_LAG_S:
            raise ValueError(f"at most {MAX_INDEX_LAG_S:g} s, got {value:g} s")
        return value


class Sabotage(_Strict):
    """Breaks an invariant on purpose, so a test can prove the checks fail. Never for real runs."""

    drop_messages: int = Field(default=0, ge=0, description="messages removed from the execution queue")
    tamper_audit_records: int = Field(default=0, ge=0, description="audit records edited after the run")
    duplicate_fires: int = Field(default=0, ge=0, description="fires Scheduler delivers twice")
    call_target_twice: int = Field(default=0, ge=0, description="target calls made twice")
    leak_slots: int = Field(default=0, ge=0, description="finished runs put back into a slot at the end")
    strand_runs: int = Field(default=0, ge=0, description="finished runs set back to pending at the end")
    remove_dlq_messages: int = Field(default=0, ge=0, description="dead letters whose DLQ message is removed")
    skip_delivered_fires: int = Field(
        default=0, ge=0, description="delivered fires whose run is replaced by one skipped as missed"
    )
    remove_work_orders: int = Field(default=0, ge=0, description="dead letters whose work order is deleted")
    stale_heads: int = Field(default=0, ge=0, description="runs whose item names a wrong chain head")
    forget_fire_segments: int = Field(
        default=0, ge=0, description="tasks with clean successes whose fire segments are removed at the end"
    )
    reopen_work_orders: int = Field(
        default=0, ge=0, description="resolved work orders of runs set back to open at the end"
    )
    rerun_completed_steps: int = Field(
        default=0, ge=0, description="succeeded workstream step runs given a second succeeded run at the end"
    )
    reopen_superseded_orders: int = Field(
        default=0, ge=0, description="work orders of superseded runs set back to open at the end"
    )
    ignore_start_tokens: int = Field(default=0, ge=0, description="starts with a token that start a new run")


class Model(_Strict):
    """How long things take in virtual time; see ``rebound_local.instrument.LatencyModel``."""

    aws_call_ms: float = Field(default=0.0, ge=0.0, le=10_000.0)
    invocation_ms: float = Field(default=0.0, ge=0.0, le=60_000.0)
    cold_start_ms: float = Field(default=0.0, ge=0.0, le=60_000.0)
    esm_start_concurrency: int | None = Field(default=None, ge=1, le=1000)
    esm_scale_per_minute: int = Field(default=300, ge=1, le=10_000)
    scheduler_invocations_per_s: int | None = Field(default=None, ge=1, le=100_000)
    concurrency: int | None = Field(
        default=None, ge=1, le=100, description="invocations of each function that run at once"
    )
    executor_max_concurrency: int | None = Field(
        default=None, ge=1, le=1000, description="the executor mapping's maximum concurrency"
    )

    def latency(self) -> LatencyModel:
        return LatencyModel(**self.model_dump(exclude={"concurrency", "executor_max_concurrency"}))


class Expect(_Strict):
    """What this scenario promises beyond the standing invariants; each becomes an invariant."""

    on_time_pct: float | None = Field(
        default=None, ge=0.0, le=100.0, description="minimum % of scheduled runs started within 60 s"
    )


BUS = "bus"
"""``queue: bus``: the body is an event an outside service puts on the environment's bus."""


class InjectedMessage(_Strict):
    at: Seconds = Field(description="offset from start")
    queue: str = "execution"
    body: str
    delay_s: int = Field(default=0, ge=0, le=900)

    @field_validator("queue")
    @classmethod
    def _known_queue(cls, value: str) -> str:
        if value not in QUEUE_NAMES and value != BUS:
            raise ValueError(f"unknown queue {value!r}; one of {', '.join(QUEUE_NAMES)}, or {BUS}")
        return value

    @model_validator(mode="after")
    def _an_event_for_the_bus(self) -> InjectedMessage:
        if self.queue == BUS:
            try:
                event = json.loads(self.body)
            except ValueError:
                raise ValueError("an event for the bus is JSON with source, detail-type and detail") from None
            if not isinstance(event, dict) or not {"source", "detail-type", "detail"} <= set(event):
                raise ValueError("an event for the bus is JSON with source, detail-type and detail")
        return self


class Operation(_Strict):
    """An operator's action on a workstream at a time (``rebound workstreams ...``): ``start`` a
    run (with ``token``, as ``workstreams run --token`` does), or act on the workstream's latest
    run. ``step`` is the step of ``skip`` and ``cancel_step`` and the ``--from`` of ``resume``;
    ``to`` the checkpoint of ``rollback``.

    ``on_end_of`` makes it a race: from ``at`` on, the operation waits for that step's task run to
    end and is carried out at that instant, with the run's outcome committed and its
    ``workstream.step.ended`` event still in the outbox (the relay has not handed it to the
    workstream yet)."""

    at: Seconds = Field(description="offset from start")
    workstream: str
    op: Literal["start", "rollback", "resume", "retry_failed", "retry", "skip", "cancel_step"]
    step: str | None = None
    to: int | None = Field(default=None, ge=1)
    reason: str = "scenario operator"
    token: str | None = Field(default=None, min_length=1, max_length=64)
    on_end_of: str | None = Field(default=None, description="a step: act the instant its run ends")

    @model_validator(mode="after")
    def _fits_the_op(self) -> Operation:
        if self.op in ("skip", "cancel_step") and self.step is None:
            raise ValueError(f"{self.op} needs the step it acts on (step:)")
        if self.step is not None and self.op not in ("skip", "cancel_step", "resume"):
            raise ValueError(f"step: is for skip, cancel_step and resume, not {self.op}")
        if self.to is not None and self.op != "rollback":
            raise ValueError(f"to: is the checkpoint of a rollback, not of {self.op}")
        if self.token is not None and self.op != "start":
            raise ValueError(f"token: names the run a start begins, not for {self.op}")
        if self.on_end_of is not None and self.op == "start":
            raise ValueError("on_end_of: acts on a run at a step's end; a start has no run yet")
        return self


RECOVERY_ACTS = ("replay", "redrive", "skip", "cancel")


class Recovery(_Strict):
    """An operator's recovery of the dead-lettered runs of the tasks ``task`` names (a task id, or
    a pattern such as ``billing-*``), each carried out as its CLI command does: ``replay`` them with
    a fresh attempt budget (``rebound runs retry-failed``), ``redrive`` their DLQ messages
    (``rebound dlq redrive``: one pass, ``--task`` unless ``task`` is ``*``, so a task id and not a
    pattern), or ``skip`` or ``cancel`` each with ``reason`` (``rebound runs skip|cancel
    --reason``). Only dead-lettered runs are acted on."""

    at: Seconds = Field(description="offset from start")
    replay: Literal["dead_lettered"] | None = None
    redrive: Literal["dlq"] | None = None
    skip: Literal["dead_lettered"] | None = None
    cancel: Literal["dead_lettered"] | None = None
    task: str = Field(default="*", min_length=1, description="a task id or a pattern (fnmatch)")
    reason: str = Field(default="scenario operator", min_length=1)

    @model_validator(mode="after")
    def _one_act(self) -> Recovery:
        acts = [act for act in RECOVERY_ACTS if getattr(self, act) is not None]
        if len(acts) != 1:
            raise ValueError(f"give exactly one of {', '.join(RECOVERY_ACTS)}; got {acts or 'none'}")
        if not self.reason.strip():
            raise ValueError("reason: say why, for the audit trail")
        if self.redrive is not None and self.task != "*" and any(c in self.task for c in "*?["):
            raise ValueError(
                "a redrive takes a task id, or * for every task, as `rebound dlq redrive --task` does; "
                f"not the pattern {self.task!r}"
            )
        return self

    @property
    def op(self) -> str:
        return next(act for act in RECOVERY_ACTS if getattr(self, act) is not None)


class FlagSwitch(_Strict):
    """An operator turning a feature flag on or off (``rebound flags set NAME on|off --reason``)."""

    at: Seconds = Field(description="offset from start")
    flag: str = Field(min_length=1, description="one of the flags (rebound.domain.flags)")
    set: Literal["on", "off"]
    reason: str = Field(default="scenario operator", min_length=1)

    @field_validator("flag")
    @classmethod
    def _known(cls, value: str) -> str:
        from rebound.domain.flags import FLAGS

        if value not in FLAGS:
            raise ValueError(f"no feature flag {value!r}; the flags are {', '.join(sorted(FLAGS))}")
        return value


def _operation_kind(value: Any) -> str | None:
    """Which kind of operation a scenario entry is: a workstream's (``workstream:``) or a recovery
    of dead-lettered runs (``replay:``, ``redrive:``, ``skip:`` or ``cancel:``). The tags carry
    brackets so that error key paths leave them out (``rebound.config.loader``)."""
    if isinstance(value, (Operation, Recovery)):
        return "operation[workstream]" if isinstance(value, Operation) else "operation[recovery]"
    if isinstance(value, FlagSwitch):
        return "operation[flag]"
    keys = set(value) if isinstance(value, dict) else set()
    if "flag" in keys and not keys & {*RECOVERY_ACTS, "workstream"}:
        return "operation[flag]"
    if "workstream" in keys and not keys & set(RECOVERY_ACTS):
        return "operation[workstream]"
    if keys & set(RECOVERY_ACTS) and "workstream" not in keys:
        return "operation[recovery]"
    return None


AnyOperation = Annotated[
    Annotated[Operation, Tag("operation[workstream]")]
    | Annotated[Recovery, Tag("operation[recovery]")]
    | Annotated[FlagSwitch, Tag("operation[flag]")],
    Discriminator(
        _operation_kind,
        custom_error_type="operation_kind",
        custom_error_message="give workstream: (with op:), one of replay:, redrive:, skip:, cancel:, "
        "or flag: (with set:)",
    ),
]


class Scenario(_Strict):
    start: UtcDatetime
    duration: Seconds
    settle: Seconds = 2 * 3600.0
    seed: int = 0
    tasks_file: str | None = None
    tasks: list[dict[str, Any]] | None = None
    task_groups: list[dict[str, Any]] = Field(default_factory=list)
    tenants: dict[Annotated[str, Field(pattern=TENANT_PATTERN)], TenantSettings] = Field(
        default_factory=dict, description="per-tenant settings, as in a task file (max_concurrent_runs)"
    )
    workstreams: list[Workstream] = Field(
        default_factory=list, description="workstreams of the scenario's tasks, as in a task file"
    )
    resources: list[ResourceSpec] = Field(default_factory=list, description="as in a task file")
    operations: list[AnyOperation] = Field(
        default_factory=list,
        description="an operator's actions, at a time: on workstreams, or recovering dead-lettered runs",
    )
    messages: list[InjectedMessage] = Field(default_factory=list)
    faults: Faults = Field(default_factory=Faults)
    model: Model = Field(default_factory=Model)
    expect: Expect = Field(default_factory=Expect)
    sabotage: Sabotage = Field(default_factory=Sabotage)
    description: str = ""

    @field_validator("duration")
    @classmethod
    def _sane_duration(cls, value: float) -> float:
        if value <= 0:
            raise ValueError("the duration must be positive")
        if value > MAX_DURATION_S:
            raise ValueError(f"at most 31 days of schedule time, got {value / 86400:.1f} days")
        return value

    @model_validator(mode="after")
    def _some_tasks(self) -> Scenario:
        if self.tasks_file is None and self.tasks is None and not self.task_groups:
            raise ValueError("give tasks_file, tasks or task_groups")
        if self.tasks_file is not None and self.tasks is not None:
            raise ValueError("give tasks_file or tasks, not both")
        return self

    @property
    def end(self) -> datetime:
        from datetime import timedelta

        return self.start + timedelta(seconds=self.duration)


class FaultsFile(_Strict):
    """``rebound local up --faults FILE``: the scenario's ``faults`` (and optionally its ``model``),
    for every client of the local endpoint; ``seed`` seeds every draw (default 0)."""

    faults: Faults
    model: Model = Field(default_factory=Model)
    seed: int = 0


def load_faults_file(path: Path | str) -> FaultsFile:
    """Read and check a faults file; errors name the file and the key path (``ConfigError``)."""
    path = Path(path)
    data = load_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError(str(path), "", "expected a mapping with a faults: key")
    try:
        return FaultsFile.model_validate(data)
    except ValidationError as exc:
        raise config_error(str(path), exc) from None


class LoadedScenario(BaseModel):
    """A validated scenario with its tasks resolved."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    file: str
    scenario: Scenario
    tasks: list[Task]
    workstreams: list[Workstream] = Field(default_factory=list)
    resources: list[ResourceSpec] = Field(default_factory=list)


def _expand_groups(groups: list[dict[str, Any]], file: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for index, group in enumerate(groups):
        where = f"task_groups[{index}]"
        if not isinstance(group, dict):
            raise ConfigError(file, where, "expected a task definition with a count")
        count = group.get("count")
        if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= 10_000:
            raise ConfigError(file, f"{where}.count", "expected a whole number from 1 to 10000")
        template = {k: v for k, v in group.items() if k != "count"}
        pattern = template.get("id")
        if not isinstance(pattern, str) or ("{n" not in pattern and count > 1):
            raise ConfigError(file, f"{where}.id", "expected an id pattern with {n}, such as 'job-{n:03d}'")
        for n in range(1, count + 1):
            try:
                task_id = pattern.format(n=n)
            except (KeyError, ValueError, IndexError) as exc:
                raise ConfigError(file, f"{where}.id", f"cannot format the id pattern: {exc}") from None
            out.append({**template, "id": task_id})
    return out


def parse_scenario(data: Any, file: str, base_dir: Path | None = None) -> LoadedScenario:
    """Validate a scenario's content and resolve its tasks (``tasks_file`` relative to ``base_dir``)."""
    if not isinstance(data, dict):
        raise ConfigError(file, "", "expected a mapping with start, duration and tasks")
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as exc:
        raise config_error(file, exc) from None

    from rebound.config.loader import load_policy_book
    from rebound.settings import default_config_dir

    book = load_policy_book(default_config_dir())
    tasks: list[Task] = []
    workstreams = list(scenario.workstreams)
    resources = list(scenario.resources)
    if scenario.tasks_file is not None:
        path = Path(scenario.tasks_file)
        if not path.is_absolute():
            path = (base_dir or Path.cwd()) / path
        try:
            raw = load_yaml(path)
        except ConfigError as exc:
            raise ConfigError(file, "tasks_file", f"{exc.file}: {exc.problem}") from None
        document = parse_task_document(raw, str(path), book)
        tasks = document.tasks
        workstreams = document.workstreams + workstreams
        resources = document.resources + resources
    elif scenario.tasks is not None:
        tasks = parse_task_file({"tasks": scenario.tasks}, file, book)
    if scenario.task_groups:
        generated = _expand_groups(scenario.task_groups, file)
        try:
            more = parse_task_file({"tasks": generated}, file, book)
        except ConfigError as exc:
            raise ConfigError(file, _group_path(exc.key_path, scenario.task_groups), exc.problem) from None
        tasks = tasks + more
    seen: set[str] = set()
    for task in tasks:
        if task.id in seen:
            raise ConfigError(file, "tasks", f"task id {task.id!r} appears more than once")
        seen.add(task.id)
    if scenario.workstreams or scenario.resources:
        # the scenario's own first, so the key paths of its problems are its own
        own = list(scenario.resources)
        check_workstreams(
            list(scenario.workstreams),
            own + resources[: len(resources) - len(own)],
            {t.id: t.tenant for t in tasks},
            file,
        )
    _check_operations(scenario, workstreams, [t.id for t in tasks], file)
    return LoadedScenario(
        file=file, scenario=scenario, tasks=tasks, workstreams=workstreams, resources=resources
    )


def task_matches(key: str, pattern: str) -> bool:
    """Whether a task (its key, ``<tenant>.<id>``) is named by a recovery's ``task``: a pattern of
    its key or, as the scenario's own file names it, of its short id."""
    return fnmatchcase(key, pattern) or fnmatchcase(key.partition(".")[2] or key, pattern)


def _check_operations(
    scenario: Scenario, workstreams: list[Workstream], task_ids: list[str], file: str
) -> None:
    """Each operation is in the window and names a workstream of the scenario and a step of it,
    or (a recovery) a task of it."""
    by_id = {w.id: w for w in workstreams}
    for index, operation in enumerate(scenario.operations):
        where = f"operations[{index}]"
        if operation.at > scenario.duration:
            raise ConfigError(file, f"{where}.at", "after the end of the window (duration)")
        if isinstance(operation, Recovery):
            if not any(task_matches(task_id, operation.task) for task_id in task_ids):
                raise ConfigError(
                    file, f"{where}.task", f"{operation.task!r} matches none of the scenario's tasks"
                )
            continue
        if isinstance(operation, FlagSwitch):
            continue
        workstream = by_id.get(operation.workstream)
        if workstream is None:
            known = ", ".join(sorted(by_id)) or "none"
            raise ConfigError(
                file, f"{where}.workstream", f"unknown workstream {operation.workstream!r}; declared: {known}"
            )
        steps = [s.task for s in workstream.steps]
        for field_name in ("step", "on_end_of"):
            named = getattr(operation, field_name)
            if named is not None and named not in steps:
                raise ConfigError(
                    file,
                    f"{where}.{field_name}",
                    f"workstream {workstream.id!r} has no step {named!r}; its steps: {', '.join(steps)}",
                )


def _group_path(key_path: str, groups: list[dict[str, Any]]) -> str:
    """``tasks[93].target`` of the expanded list -> ``task_groups[1].target``."""
    if not key_path.startswith("tasks["):
        return key_path
    index_text, _, rest = key_path[len("tasks[") :].partition("]")
    try:
        index = int(index_text)
    except ValueError:
        return key_path
    for group_index, group in enumerate(groups):
        count = int(group.get("count", 0))
        if index < count:
            return f"task_groups[{group_index}]{rest}"
        index -= count
    return key_path


def load_scenario(path: Path | str) -> LoadedScenario:
    path = Path(path)
    return parse_scenario(load_yaml(path), str(path), path.parent)
