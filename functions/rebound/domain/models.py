"""Pydantic models of the domain: tasks, runs, retry policies, audit records and work orders."""

from __future__ import annotations

import hashlib
import ipaddress
import json
import re
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from rebound.domain import backoff, cron, tenancy
from rebound.domain.backoff import JitterMode as JitterMode
from rebound.domain.durations import Seconds, parse_rate
from rebound.domain.jsonutil import canonical_bytes
from rebound.domain.timefmt import UtcDatetime

TASK_ID_PATTERN = r"^[a-z0-9_-]{1,48}$"
TENANT_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,47}$"
TASK_KEY_PATTERN = r"^([a-z0-9][a-z0-9_-]{0,47}\.)?[a-z0-9_-]{1,48}$"
"""A task's key: ``<tenant>.<id>`` (``rebound.domain.tenancy``), or a bare id written before tenancy."""
ERROR_CODE_PATTERN = r"^[A-Z][A-Z0-9_]{0,63}$"
MAX_PAYLOAD_BYTES = 256 * 1024
MAX_TASK_TIMEOUT_S = 270
"""The executor function runs for at most 300 s; an attempt must fit inside it with margin."""
MAX_ASYNC_DURATION_S = 86400
"""An asynchronous attempt (``target.mode: async``) may run at most a day, heartbeats permitting."""

TaskId = Annotated[str, Field(pattern=TASK_ID_PATTERN, description="[a-z0-9_-], at most 48 characters")]
TaskKey = Annotated[
    str,
    Field(
        pattern=TASK_KEY_PATTERN,
        description="[a-z0-9_-], at most 48 characters; stored as <tenant>.<id> (the loader adds the tenant)",
    ),
]
Tenant = Annotated[str, Field(pattern=TENANT_PATTERN)]
ErrorCode = Annotated[str, Field(pattern=ERROR_CODE_PATTERN)]


class Strict(BaseModel):
    """Refuses unknown keys so that a typo in a file is an error, not a silent default."""

    model_config = ConfigDict(extra="forbid")


# --------------------------------------------------------------------------- retry policies


class Severity(StrEnum):
    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"
    CRITICAL = "critical"


class TargetBudget(Strict):
    """A retry budget per target (``target_budget:`` in a policy): when the failures of one target
    (an http host, a lambda function, a sim target's ``name``) within ``window`` reach
    ``threshold``, from at least ``min_runs`` runs, Rebound stops spending attempts on it. Failed
    runs are held (``waiting``, reason ``target-unhealthy``, the failed attempt not counted), one
    work order is opened for the target, one held run is let through as a probe every
    ``probe_every``, and once a probe succeeds the held runs are released at most
    ``release_per_minute`` a minute. A run held longer than ``max_hold`` is dead-lettered
    (``TARGET_UNHEALTHY``). See ``rebound.domain.target_budget``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = True
    window: Annotated[Seconds, Field(gt=0, le=86400)] = 300.0
    threshold: int = Field(default=10, ge=1, le=1000)
    min_runs: int = Field(default=3, ge=1, le=1000)
    probe_every: Annotated[Seconds, Field(gt=0, le=86400)] = 120.0
    release_per_minute: int = Field(default=10, ge=1, le=1000)
    max_hold: Annotated[Seconds, Field(gt=0, le=7 * 86400)] = 86400.0

    @model_validator(mode="after")
    def _runs_within_threshold(self) -> TargetBudget:
        if self.min_runs > self.threshold:
            raise ValueError(
                f"min_runs ({self.min_runs}) must not exceed threshold ({self.threshold}): the "
                "failures of fewer runs than that could never trip the budget"
            )
        return self


class RetryPolicy(Strict):
    """A complete, resolved retry policy. Its delays live in ``rebound.domain.backoff``, the retry decision in
    ``rebound.domain.retry``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = "default"
    version: int = Field(default=0, ge=0)
    max_attempts: int = Field(ge=1, le=100)
    base_delay: Annotated[Seconds, Field(gt=0)]
    multiplier: float = Field(ge=1.0, le=10.0)
    max_delay: Annotated[Seconds, Field(gt=0)]
    max_age: Annotated[Seconds, Field(gt=0)] | None = None
    jitter: JitterMode = JitterMode.NONE
    retryable_errors: tuple[ErrorCode, ...] = ()
    terminal_errors: tuple[ErrorCode, ...] = ()
    severity: Severity = Severity.HIGH
    runbook_url: str | None = None
    max_wait: Annotated[Seconds, Field(gt=0, le=7 * 86400)] = Field(
        default=3600.0,
        description="longest a run may wait for a busy mutex, quota or overlap slot before it is "
        "dead-lettered with WAIT_EXHAUSTED",
    )
    target_budget: TargetBudget = Field(
        default_factory=TargetBudget, description="the retry budget per target (rebound.domain.target_budget)"
    )

    @model_validator(mode="after")
    def _cap_not_below_base(self) -> RetryPolicy:
        if self.max_delay < self.base_delay:
            raise ValueError(
                f"max_delay ({self.max_delay:g}s) must not be below base_delay ({self.base_delay:g}s)"
            )
        overlap = set(self.retryable_errors) & set(self.terminal_errors)
        if overlap:
            raise ValueError(f"error codes listed as both retryable and terminal: {sorted(overlap)}")
        return self

    def should_schedule_retry(self, attempt: int) -> bool:
        return backoff.should_schedule_retry(self, attempt)

    def delay_for_attempt(self, attempt: int) -> float:
        return backoff.delay_for_attempt(self, attempt)


POLICY_FIELDS = frozenset(RetryPolicy.model_fields) - {"name", "version"}


class PolicyOverride(Strict):
    """A task's inline ``retry_policy`` mapping: a named policy to start from plus the keys it changes."""

    extends: str = "default"
    max_attempts: int | None = None
    base_delay: Seconds | None = None
    multiplier: float | None = None
    max_delay: Seconds | None = None
    max_age: Seconds | None = None
    jitter: JitterMode | None = None
    retryable_errors: tuple[ErrorCode, ...] | None = None
    terminal_errors: tuple[ErrorCode, ...] | None = None
    severity: Severity | None = None
    runbook_url: str | None = None
    max_wait: Seconds | None = None
    target_budget: TargetBudget | None = None

    def changes(self) -> dict[str, Any]:
        return self.model_dump(exclude={"extends"}, exclude_none=True, mode="json")


# --------------------------------------------------------------------------- tasks


class DstSpec(Strict):
    """What a Unix-cron task does at DST changes. The defaults are EventBridge Scheduler's own."""

    repeated: Literal["once", "twice"] = Field(default="once", description="the repeated hour at fall-back")
    missing: Literal["skip", "shift"] = Field(
        default="skip",
        description="the hour that does not exist at spring-forward; shift = first valid instant",
    )

    @property
    def is_scheduler_default(self) -> bool:
        return self.repeated == "once" and self.missing == "skip"


class ScheduleSpec(Strict):
    """When a task fires: exactly one of ``cron`` (Unix 5-field), ``rate``, ``at`` or ``aws``.

    ``aws`` takes an EventBridge Scheduler expression as is: ``cron(0 9 ? * MON-FRI *)``,
    ``rate(5 minutes)`` or ``at(2026-03-07T10:00:00)``. ``timezone`` is an IANA zone.
    """

    cron: str | None = None
    rate: str | None = None
    at: UtcDatetime | None = None
    aws: str | None = None
    timezone: str = "UTC"
    dst: DstSpec = Field(default_factory=DstSpec)
    jitter_window: Annotated[Seconds, Field(ge=0, le=86400)] | None = Field(
        default=None, description="Scheduler's flexible time window: deliver at a random moment within it"
    )
    end: UtcDatetime | None = Field(
        default=None,
        description="no fire after this instant (Scheduler's EndDate); the run ledger expects none either",
    )
    stagger: Annotated[Seconds, Field(ge=0, le=900)] | None = Field(
        default=None, description="delay each fire by a fixed offset in [0, stagger) derived from the task id"
    )

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise ValueError(f"unknown IANA time zone {value!r}") from exc
        return value

    @field_validator("cron")
    @classmethod
    def _valid_cron(cls, value: str | None) -> str | None:
        return None if value is None else cron.validate_unix_cron(value)

    @field_validator("aws")
    @classmethod
    def _valid_aws(cls, value: str | None) -> str | None:
        if value is not None:
            cron.parse_schedule_expression(value.strip())
            return value.strip()
        return None

    @field_validator("rate")
    @classmethod
    def _valid_rate(cls, value: str | None) -> str | None:
        if value is not None:
            parse_rate(value)
        return value

    @model_validator(mode="after")
    def _exactly_one(self) -> ScheduleSpec:
        given = [key for key in ("cron", "rate", "at", "aws") if getattr(self, key) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of cron, rate, at or aws (got {', '.join(given) or 'none'})")
        if self.cron is None and not self.dst.is_scheduler_default:
            raise ValueError(
                "dst applies to Unix cron schedules only (AWS expressions keep Scheduler's rules)"
            )
        if self.jitter_window is not None and self.jitter_window % 60:
            raise ValueError("jitter_window is whole minutes (Scheduler's flexible window), e.g. 5m")
        if self.end is not None and self.at is not None:
            raise ValueError("end applies to recurring schedules; an at() schedule fires once")
        return self

    def fires_at(self, when: datetime) -> bool:
        """Whether a fire at ``when`` is inside the schedule's life (not after its ``end``)."""
        return self.end is None or when <= self.end

    def stagger_offset(self, task_id: str) -> float:
        """The task's fixed delay in [0, stagger): the same every fire, spread across tasks."""
        if not self.stagger:
            return 0.0
        digest = int.from_bytes(hashlib.sha256(task_id.encode()).digest()[:8], "big")
        return float(digest % int(self.stagger * 1000)) / 1000.0

    @property
    def kind(self) -> str:
        return next(key for key in ("cron", "rate", "at", "aws") if getattr(self, key) is not None)


class OverlapPolicy(StrEnum):
    """What to do when a run is due while another run of the same task is still running."""

    ALLOW_ALL = "allow_all"  # run concurrently
    SKIP = "skip"  # the new run is skipped
    BUFFER_ONE = "buffer_one"  # the new run waits for the running one; a third is skipped
    CANCEL_OTHER = "cancel_other"  # the running run is cancelled and the new one starts


class CatchUpPolicy(Strict):
    """What happens to fires that were missed (an outage, a pause)."""

    policy: Literal["skip", "latest", "all"] = "latest"
    max_runs: int = Field(default=10, ge=1, le=1000, description="with 'all': at most this many")
    window: Annotated[Seconds, Field(gt=0)] = Field(default=86400.0, description="only fires this recent")


class SlaSpec(Strict):
    max_start_delay: Annotated[Seconds, Field(gt=0)] | None = None
    max_duration: Annotated[Seconds, Field(gt=0)] | None = None


class SimAsync(Strict):
    """A simulated asynchronous worker (``behavior: {async: {...}}``), played on the simulated clock:
    it heartbeats every ``heartbeat_every`` until ``stop_heartbeats_after`` (if given), then reports
    completion (or ``fail_with``) once ``duration`` has passed, ``duplicate_completions`` extra times."""

    duration: Annotated[Seconds, Field(gt=0, le=2 * MAX_ASYNC_DURATION_S)]
    heartbeat_every: Annotated[Seconds, Field(gt=0, le=MAX_ASYNC_DURATION_S)] = 60.0
    stop_heartbeats_after: Annotated[Seconds, Field(ge=0)] | None = None
    fail_with: ErrorCode | None = Field(default=None, description="report failure with this code")
    duplicate_completions: int = Field(default=0, ge=0, le=5)


class SimOutage(Strict):
    """The simulated dependency is down from ``after`` (counted from when the simulation, or the
    process that plays the target, started) for ``for``: inside that window every call fails with
    a retryable error (``SIM_OUTAGE``); outside it the call succeeds."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, serialize_by_alias=True)

    after: Annotated[Seconds, Field(ge=0)]
    for_: Annotated[Seconds, Field(gt=0)] = Field(alias="for")


class SimBehavior(Strict):
    """What the built-in simulated target does. One primary behaviour; ``duration_s`` may join any."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, serialize_by_alias=True)

    ok: bool | None = None
    fail_first: int | None = Field(default=None, ge=0)
    always_fail: bool | None = None
    terminal_error: ErrorCode | None = None
    fail_rate: float | None = Field(default=None, ge=0.0, le=1.0)
    seed: int | None = None
    hang: bool | None = Field(default=None, description="sleeps until its deadline, then fails with TIMEOUT")
    stall: bool | None = Field(
        default=None,
        description="ignores its deadline and never returns: a hung dependency that only the "
        "function's own timeout ends (locally: faults.handler_timeouts: enforce)",
    )
    duration_s: float | None = Field(default=None, ge=0.0)
    async_: SimAsync | None = Field(
        default=None,
        alias="async",
        description="an asynchronous worker that heartbeats and reports completion (target.mode: async)",
    )
    outage: SimOutage | None = Field(
        default=None, description="fails (retryably) inside a window of time, succeeds outside it"
    )

    @model_validator(mode="after")
    def _one_behavior(self) -> SimBehavior:
        primary = [
            key
            for key in (
                "ok",
                "fail_first",
                "always_fail",
                "terminal_error",
                "fail_rate",
                "hang",
                "stall",
                "outage",
            )
            if getattr(self, key) not in (None, False)
        ]
        if self.async_ is not None:
            primary.append("async")
        if len(primary) > 1:
            raise ValueError(f"give one behavior, not {primary}")
        if self.seed is not None and self.fail_rate is None:
            raise ValueError("seed only applies to fail_rate")
        if not primary and self.duration_s is None:
            self.ok = True
        return self


TargetMode = Literal["sync", "async"]
MODE_DESCRIPTION = (
    "sync: the attempt ends when the call returns; async: the call starts the work, which reports "
    "heartbeats and its completion with a completion token (see heartbeat_timeout, max_duration)"
)


class SimTarget(Strict):
    type: Literal["sim"]
    name: str | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        description="the simulated dependency's identity for retry budgets (default: the task id)",
    )
    behavior: SimBehavior = Field(default_factory=lambda: SimBehavior(ok=True))
    mode: TargetMode = Field(default="sync", description=MODE_DESCRIPTION)


class LambdaTarget(Strict):
    type: Literal["lambda"]
    mode: TargetMode = Field(default="sync", description=MODE_DESCRIPTION + " (Lambda: an Event invoke)")
    function: str = Field(min_length=1, description="function name or ARN")
    qualifier: str | None = None


SECRET_REFERENCE_PATTERN = r"^(ssm:/|/|secretsmanager:|arn:aws[a-z-]*:(ssm|secretsmanager):)\S+$"
SecretReference = Annotated[
    str,
    Field(
        pattern=SECRET_REFERENCE_PATTERN,
        max_length=2048,
        description="ssm:/rebound/... (or /rebound/...), secretsmanager:NAME, or an SSM or "
        "Secrets Manager ARN",
    ),
]
_CREDENTIAL_HEADER = re.compile(
    r"^(authorization|proxy-authorization|cookie|x-amz-security-token)$|"
    r"(api[-_]?key|token|secret|password|passwd|credential|signature|auth)",
    re.IGNORECASE,
)


def is_credential_header(name: str) -> bool:
    """Whether a header name says it carries a credential (``Authorization``, ``X-Api-Key``, ...)."""
    return bool(_CREDENTIAL_HEADER.search(name))


class SecretHeader(Strict):
    """A header whose value is read from a secret at call time: ``{secret: ssm:/rebound/...}``.

    Only the reference is stored (with the task, in its runs and audit records); the value is
    read by the executor when it sends the request and is never written anywhere.
    """

    secret: SecretReference
    prefix: str = Field(
        default="", max_length=64, description="sent before the value, such as 'Bearer ' (stored as is)"
    )


class HttpTarget(Strict):
    type: Literal["http"]
    mode: TargetMode = Field(default="sync", description=MODE_DESCRIPTION)
    url: str = Field(pattern=r"^https?://", max_length=2048)
    secret: SecretReference | None = Field(
        default=None, description="SSM parameter name or Secrets Manager ARN holding the HMAC key"
    )
    headers: dict[str, str | SecretHeader] = Field(default_factory=dict)

    @field_validator("headers")
    @classmethod
    def _no_plain_credentials(cls, value: dict[str, str | SecretHeader]) -> dict[str, str | SecretHeader]:
        for name, given in value.items():
            if isinstance(given, str) and is_credential_header(name):
                raise ValueError(
                    f"headers.{name}: a credential in plain text would be stored with the task, its "
                    f"runs and its audit trail; give it by reference instead: "
                    f"{name}: {{secret: ssm:/rebound/<env>/tenants/<tenant>/...}} "
                    "(optionally with prefix: 'Bearer ')"
                )
        return value

    @property
    def host(self) -> str:
        return (urlsplit(self.url).hostname or "").lower()


class TargetRules(Strict):
    """What an environment lets targets do (``targets:`` in its environment file).

    By default only ``https`` URLs whose names resolve to public addresses are called, no error
    answer is kept, and the ``sim`` target is refused; ``local`` and ``dev`` enable ``sim``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    sim: bool = Field(default=False, description="tasks may use the built-in sim target")
    plain_http_hosts: tuple[str, ...] = Field(
        default=(), description="host names or addresses that may be called over plain http"
    )
    allow_networks: tuple[str, ...] = Field(
        default=(),
        description="CIDR blocks outside the public internet that targets may reach (loopback, private)",
    )
    excerpt_hosts: tuple[str, ...] = Field(
        default=(), description="hosts whose error answers are kept (redacted) in the run's error message"
    )

    @field_validator("plain_http_hosts", "excerpt_hosts")
    @classmethod
    def _lower(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(h.strip().lower().strip("[]") for h in value)

    @field_validator("allow_networks")
    @classmethod
    def _networks(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for net in value:
            try:
                ipaddress.ip_network(net, strict=False)
            except ValueError as exc:
                raise ValueError(f"{net!r} is not a CIDR block such as 10.1.0.0/16") from exc
        return value

    @classmethod
    def defaults_for(cls, environment: str) -> TargetRules:
        """``sim`` in ``local`` and ``dev``; ``local`` also reaches loopback test servers over http."""
        if environment == "local":
            loopback = ("127.0.0.1", "localhost", "::1")
            return cls(
                sim=True,
                plain_http_hosts=loopback,
                allow_networks=("127.0.0.0/8", "::1/128"),
                excerpt_hosts=loopback,
            )
        return cls(sim=environment in SIM_ENVIRONMENTS)


SIM_ENVIRONMENTS = frozenset({"local", "dev"})


Target = Annotated[SimTarget | LambdaTarget | HttpTarget, Field(discriminator="type")]


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


# --------------------------------------------------------------------------- runs


class RunState(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    RETRY_SCHEDULED = "retry_scheduled"
    DEAD_LETTERED = "dead_lettered"
    REPLAYED = "replayed"
    SKIPPED = "skipped"
    CANCELLED = "cancelled"
    SUPERSEDED = "superseded"
    """A dead-lettered run whose work another run took over (a workstream ran its step again):
    closed, never redriven, replayed or retried; ``superseded_by`` names what replaced it."""


class Trigger(StrEnum):
    SCHEDULE = "schedule"
    EVENT = "event"
    MANUAL = "manual"


class AttemptOutcome(StrEnum):
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMEOUT = "timeout"
    CANCELLED = "cancelled"


class BudgetOverrides(BaseModel):
    """What an operator changed for one attempt budget of one run (``rebound runs retry``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    timeout_s: int | None = Field(default=None, ge=1, le=MAX_TASK_TIMEOUT_S)
    max_attempts: int | None = Field(default=None, ge=1, le=100)


class Attempt(BaseModel):
    n: int = Field(ge=1)
    started_at: UtcDatetime
    ended_at: UtcDatetime | None = None
    outcome: AttemptOutcome = AttemptOutcome.RUNNING
    error_code: str | None = None
    error_message: str | None = None
    retryable: bool | None = None
    duration_ms: int | None = None


class Run(BaseModel):
    """One logical execution of a task, identified by task and logical fire time."""

    run_id: str
    task_id: str
    tenant: str
    trigger: Trigger
    scheduled_for: UtcDatetime
    created_at: UtcDatetime
    updated_at: UtcDatetime
    state: RunState = RunState.PENDING
    attempt: int = Field(default=0, ge=0, description="attempts started, over the run's whole life")
    budget_start: int = Field(default=0, ge=0, description="value of attempt when the current budget began")
    budget_started_at: UtcDatetime | None = None
    budget_overrides: BudgetOverrides | None = Field(
        default=None, description="the operator's overrides for the current budget only"
    )
    attempts: list[Attempt] = Field(default_factory=list)
    lease_expires_at: UtcDatetime | None = None
    lease_owner: str | None = None
    next_retry_at: UtcDatetime | None = Field(
        default=None, description="when the message that carries the next step is due (a retry, a poll)"
    )
    dispatch: int = Field(
        default=0,
        ge=0,
        description="token of the one message that may carry this run's next step; every new "
        "message for the run gets a new token, so older copies are recognised as stale",
    )
    dispatch_reference: str | None = None
    last_error_code: str | None = None
    last_error_message: str | None = None
    last_error_retryable: bool | None = None
    dead_lettered_at: UtcDatetime | None = None
    dead_letter_reason: str | None = None
    work_order_id: str | None = None
    dlq_message_id: str | None = None
    policy_ref: str | None = None
    event_detail: dict[str, Any] | None = None
    due_at: UtcDatetime | None = Field(default=None, description="when the first attempt was meant to start")
    waits: int = Field(default=0, ge=0, description="wait episodes: times the run found a slot busy")
    waiting_since: UtcDatetime | None = Field(default=None, description="start of the current wait episode")
    wait_reason: str | None = None
    wait_polls: int = Field(default=0, ge=0, description="polls in the current wait episode")
    releases: int = Field(
        default=0, ge=0, description="times a message for it was handed back unstarted (too little time)"
    )
    slots: list[str] = Field(default_factory=list, description="concurrency slots the running attempt holds")
    forgiven: list[int] = Field(
        default_factory=list,
        description="attempts that failed while their target was unhealthy: the run was held, and "
        "they do not count against its attempt budget",
    )
    held_at: UtcDatetime | None = Field(default=None, description="a retry held while its task is paused")
    catch_up: bool = Field(default=False, description="dispatched by the run ledger for a missed fire")
    sla_breaches: list[str] = Field(default_factory=list, description="start_delay, duration")
    async_token_id: str | None = Field(
        default=None,
        description="the id of the completion token of the running asynchronous attempt; cleared when "
        "it completes, fails or times out, so the token is used once",
    )
    async_ends_at: UtcDatetime | None = Field(
        default=None, description="when the running asynchronous attempt reaches its max_duration"
    )
    heartbeat_timeout_s: float | None = Field(
        default=None, description="the running asynchronous attempt's heartbeat timeout (from its task)"
    )
    heartbeat_at: UtcDatetime | None = Field(default=None, description="the last heartbeat of the attempt")
    heartbeats: int = Field(default=0, ge=0, description="heartbeats of the running asynchronous attempt")
    progress: float | None = Field(default=None, ge=0.0, le=1.0, description="last reported progress, 0..1")
    workstream_run: str | None = Field(
        default=None, description="the workstream run this run is a step of (its end is reported there)"
    )
    superseded_by: str | None = Field(
        default=None, description="what took this run's work over when it was superseded (a run id)"
    )
    audit_seq: int = 0
    audit_head: str = "0" * 64
    rev: int = Field(
        default=0, ge=0, description="write revision: every write of the item increments it (optimistic lock)"
    )

    @model_validator(mode="before")
    @classmethod
    def _tenant_of_its_task(cls, data: Any) -> Any:
        """A run's tenant is its task's: the tenant its task key names, whatever whoever started
        it said (a workstream step, a replay, an event). Only a run of a task stored before
        tenancy (a key with no tenant part) keeps the tenant it was given."""
        if isinstance(data, dict):
            owner = tenancy.tenant_of(str(data.get("task_id") or ""))
            if owner is not None and data.get("tenant") != owner:
                data = {**data, "tenant": owner}
        return data

    @property
    def waiting(self) -> bool:
        return self.waiting_since is not None

    @property
    def attempts_in_budget(self) -> int:
        """Attempts of the current budget, less those forgiven (failed while the target was unhealthy)."""
        return self.attempt - self.budget_start - sum(1 for n in self.forgiven if n > self.budget_start)

    @property
    def current_attempt(self) -> Attempt | None:
        return self.attempts[-1] if self.attempts else None


# --------------------------------------------------------------------------- audit


def with_changes(run: Run, update: dict[str, Any]) -> Run:
    """``run`` with ``update`` applied and validated (``model_copy`` would not validate)."""
    return Run.model_validate({**run.model_dump(), **update})


class AuditRecord(BaseModel):
    """One link of a subject's hash chain. ``hash`` covers every other field but ``mac``; ``mac``
    is the keyed MAC of ``hash``."""

    subject: str
    seq: int = Field(ge=1)
    at: UtcDatetime
    actor: str
    action: str
    from_state: str | None = None
    to_state: str | None = None
    evidence: dict[str, Any] = Field(default_factory=dict)
    prev_hash: str
    hash: str
    mac_alg: str | None = None
    """How ``mac`` was made (``rebound.domain.audit.MAC_ALG``); ``None``: an unkeyed record,
    written before the chain was keyed."""
    mac_key: str | None = None
    """The key ``mac`` was derived from (a KMS key ARN, or ``local:<name>``)."""
    mac: str | None = None
    """HMAC-SHA256 of ``hash`` (which covers every other field), with the key of the record's day
    (``rebound.domain.audit``)."""


# --------------------------------------------------------------------------- work orders


class WorkOrderState(StrEnum):
    OPEN = "open"
    ACKNOWLEDGED = "acknowledged"
    RESOLVED = "resolved"


class Resolution(StrEnum):
    REPLAYED = "replayed"
    SKIPPED = "skipped"
    FIXED = "fixed"
    CANCELLED = "cancelled"
    SUPERSEDED = "superseded"


class DeliveryStatus(StrEnum):
    DELIVERED = "delivered"
    FAILED = "failed"


class Delivery(BaseModel):
    channel: str
    status: DeliveryStatus
    at: UtcDatetime
    attempts: int = 1
    detail: str = ""
    ref: str | None = Field(
        default=None,
        description="what the receiver named the message, for following it up (Slack: channel/ts)",
    )


class WorkOrder(BaseModel):
    work_order_id: str
    subject: str
    run_id: str | None = None
    task_id: str | None = None
    tenant: str | None = None
    state: WorkOrderState = WorkOrderState.OPEN
    severity: Severity = Severity.HIGH
    reason: str
    error_code: str | None = None
    attempts: int = 0
    runbook_url: str | None = None
    message_id: str | None = None
    opened_at: UtcDatetime
    acknowledged_at: UtcDatetime | None = None
    acknowledged_by: str | None = None
    resolved_at: UtcDatetime | None = None
    resolved_by: str | None = None
    resolution: Resolution | None = None
    note: str | None = None
    deliveries: list[Delivery] = Field(default_factory=list)
    resolve_deliveries: list[Delivery] = Field(
        default_factory=list, description="the resolved notice on each channel, once resolved"
    )
    occurrences: list[str] = Field(
        default_factory=list,
        description="when its subject failed again while the order was open (a flapping run)",
    )
    resolve_reason: str | None = None
    level: int | None = Field(
        default=None,
        ge=1,
        le=4,
        description="escalation level 1-4 (rebound.domain.escalation_levels), judged at every write; "
        "an order written before levels were recorded has none and reads as its derived level",
    )
    audit_seq: int = 0
    audit_head: str = "0" * 64
