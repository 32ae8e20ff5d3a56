"""A task as written in a task file, and the task file itself (tasks, tenants' settings)."""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Annotated, Any

from pydantic import Field, field_validator, model_validator

from rebound.domain import tenancy
from rebound.domain.basics import (
    MAX_ASYNC_DURATION_S,
    MAX_PAYLOAD_BYTES,
    MAX_TASK_TIMEOUT_S,
    TASK_KEY_PATTERN,
    Strict,
    TaskKey,
    Tenant,
)
from rebound.domain.durations import Seconds
from rebound.domain.jsonutil import canonical_bytes
from rebound.domain.retry_policy import PolicyOverride
from rebound.domain.schedule_spec import CatchUpPolicy, OverlapPolicy, ScheduleSpec, SlaSpec
from rebound.domain.target_specs import CapacityReserve, SimTarget, Target


class TaskState(StrEnum):
    ACTIVE = "active"
    PAUSED = "paused"


class Task(Strict):
    """A task definition as written in a task file, its id qualified with its tenant by the loader
    (``TaskFile``): ``id: nightly`` of tenant ``acme`` is the task ``acme.nightly``."""

    id: TaskKey
    tenant: Tenant
    description: str = ""
    schedule: ScheduleSpec | None = None
    event: dict[str, Any] | None = Field(
        default=None, description="an EventBridge event pattern that triggers the task"
    )
    target: Target
    payload: dict[str, Any] = Field(default_factory=dict)
    retry_policy: str | PolicyOverride = "default"
    timeout_s: int = Field(default=60, ge=1, le=MAX_TASK_TIMEOUT_S)
    overlap: OverlapPolicy = OverlapPolicy.ALLOW_ALL
    mutex_group: Annotated[str, Field(pattern=TASK_KEY_PATTERN)] | None = None
    catch_up: CatchUpPolicy = Field(default_factory=CatchUpPolicy)
    sla: SlaSpec | None = None
    state: TaskState = TaskState.ACTIVE
    heartbeat_timeout: Annotated[Seconds, Field(gt=0)] | None = Field(
        default=None,
        description="async targets: the attempt fails with HEARTBEAT_TIMEOUT when no heartbeat (or "
        "completion) arrives for this long",
    )
    max_duration: Annotated[Seconds, Field(gt=0)] | None = Field(
        default=None, description="async targets: the attempt fails with TIMEOUT after this long (<= 24h)"
    )
    capacity_reserve: CapacityReserve | None = Field(
        default=None,
        description="ask a capacity service before each attempt (POST {url}/ops/capacity/reserve); "
        "a refusal holds the run waiting (default: the tenant's, if it sets one)",
    )

    @field_validator("payload")
    @classmethod
    def _payload_fits(cls, value: dict[str, Any]) -> dict[str, Any]:
        size = len(canonical_bytes(value))
        if size > MAX_PAYLOAD_BYTES:
            raise ValueError(f"payload is {size} bytes; the limit is {MAX_PAYLOAD_BYTES} (256 KiB)")
        return value

    @field_validator("event")
    @classmethod
    def _valid_pattern(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is None:
            return None
        if not value:
            raise ValueError("an event pattern needs at least one key, such as source or detail-type")
        _check_pattern(value, "event")
        size = len(canonical_bytes(value))
        if size > MAX_EVENT_PATTERN_BYTES:
            raise ValueError(
                f"the event pattern is {size} bytes; EventBridge takes at most {MAX_EVENT_PATTERN_BYTES}"
            )
        return value

    @model_validator(mode="after")
    def _one_trigger(self) -> Task:
        if self.schedule is not None and self.event is not None:
            raise ValueError("give schedule or event, not both")
        return self

    @model_validator(mode="after")
    def _own_tenant(self) -> Task:
        """A key names its tenant: a task can never be filed under, or queue in, another tenant."""
        for name, value in (("id", self.id), ("mutex_group", self.mutex_group)):
            owner = tenancy.tenant_of(value) if value else None
            if value is not None and owner is not None and owner != self.tenant:
                raise ValueError(
                    f"{name} {value!r} belongs to tenant {owner!r}, but the task's tenant is "
                    f"{self.tenant!r}; write the short id ({tenancy.short_id(value)!r}) and the tenant"
                )
        return self

    def qualified(self) -> Task:
        """This task with its id (and mutex group) qualified by its tenant; the loader's one step."""
        update = {"id": tenancy.qualify(self.tenant, self.id)}
        if self.mutex_group is not None:
            update["mutex_group"] = tenancy.qualify(self.tenant, self.mutex_group)
        return self.model_copy(update=update)

    @field_validator("heartbeat_timeout", "max_duration")
    @classmethod
    def _at_most_a_day(cls, value: float | None) -> float | None:
        if value is not None and value > MAX_ASYNC_DURATION_S:
            raise ValueError(f"at most 24h ({MAX_ASYNC_DURATION_S} s), got {value:g} s")
        return value

    @model_validator(mode="after")
    def _async_limits(self) -> Task:
        simulated = self.target.behavior.async_ if isinstance(self.target, SimTarget) else None
        if not self.is_async:
            if self.heartbeat_timeout is not None or self.max_duration is not None:
                raise ValueError(
                    "heartbeat_timeout and max_duration apply to asynchronous targets only: "
                    "add target.mode: async, or remove them"
                )
            if simulated is not None:
                raise ValueError("target.behavior.async needs target.mode: async")
            return self
        if self.heartbeat_timeout is None or self.max_duration is None:
            missing = [k for k in ("heartbeat_timeout", "max_duration") if getattr(self, k) is None]
            raise ValueError(
                f"an asynchronous target (target.mode: async) needs {' and '.join(missing)} "
                f"(durations such as 5m or 3h, at most 24h)"
            )
        if self.heartbeat_timeout > self.max_duration:
            raise ValueError(
                f"heartbeat_timeout ({self.heartbeat_timeout:g}s) must not exceed max_duration "
                f"({self.max_duration:g}s)"
            )
        if isinstance(self.target, SimTarget) and simulated is None:
            raise ValueError(
                "an asynchronous sim target needs behavior.async: {duration: ..., heartbeat_every: ...}"
            )
        return self

    @property
    def is_async(self) -> bool:
        return self.target.mode == "async"

    @property
    def policy_name(self) -> str:
        return self.retry_policy if isinstance(self.retry_policy, str) else self.retry_policy.extends


MAX_EVENT_PATTERN_BYTES = 4096
_PATTERN_SCALARS = (str, int, float, bool, type(None))


def _check_pattern(pattern: dict[str, Any], path: str) -> None:
    """EventBridge's pattern shape: each key maps to an object (nested fields) or to a non-empty
    array of values or filters (``{"prefix": ...}`` and the like). Names the bad key's path."""
    for key, value in pattern.items():
        where = f"{path}.{key}"
        if isinstance(value, dict):
            if not value:
                raise ValueError(f"{where}: an empty object matches nothing; remove it or add fields")
            _check_pattern(value, where)
        elif isinstance(value, list):
            if not value:
                raise ValueError(f"{where}: an empty array matches nothing; list the values to match")
            for item in value:
                if not isinstance(item, (*_PATTERN_SCALARS, dict)):
                    raise ValueError(f"{where}: {item!r} is not a value or a filter EventBridge can match")
        else:
            raise ValueError(
                f"{where}: EventBridge matches against an array of values: write [{json.dumps(value)}], "
                f"not {json.dumps(value)}"
            )


class TenantSettings(Strict):
    max_concurrent_runs: int | None = Field(default=None, ge=1, le=100_000)
    capacity_reserve: CapacityReserve | None = Field(
        default=None, description="the capacity service the tenant's tasks ask, unless one names its own"
    )


class TaskFile(Strict):
    """A task file. Its tasks' ids are short (``nightly``); validating the file qualifies each with
    its tenant (``acme.nightly``), so ids are unique per tenant: two tenants may both have a
    ``nightly``, one tenant may not have two."""

    tasks: list[Task]
    tenants: dict[Tenant, TenantSettings] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _qualified_unique_ids(self) -> TaskFile:
        self.tasks = [task.qualified() for task in self.tasks]
        seen: set[str] = set()
        for task in self.tasks:
            if task.id in seen:
                raise ValueError(
                    f"task id {tenancy.short_id(task.id)!r} appears more than once for tenant {task.tenant!r}"
                )
            seen.add(task.id)
        return self
