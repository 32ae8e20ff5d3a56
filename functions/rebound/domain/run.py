"""A run and its attempts: the states a run moves through, what started it, and each attempt's
outcome."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rebound.domain import tenancy
from rebound.domain.basics import MAX_TASK_TIMEOUT_S
from rebound.domain.timefmt import UtcDatetime, parse_utc


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


STATE_INDEX_KEYS = frozenset({"state", "updated_at"})
"""The keys of the runs' ``by_state`` index: stored for a run the index lists (``in_state_index``)."""


TASK_INDEX_KEYS = frozenset({"task_id", "scheduled_for"})
"""The keys of the runs' ``by_task_keys`` index: stored for a run the index lists (``found_by_fire``)."""


def found_by_fire(data: Mapping[str, Any]) -> bool:
    """Whether a run (its stored form) is listed with its task by its fire, not by ``by_task_keys``:
    a clean success (``in_state_index`` is false) whose claim found its fire owed
    (``Run.by_fire``, ``rebound.domain.fire_segments``). Such a run is stored without the index's
    keys (they travel in ``doc``): one index write fewer. Any other state lists it again."""
    return bool(data.get("by_fire")) and data.get("state") == RunState.SUCCEEDED.value


UNLISTED_CLAIM_WINDOW = timedelta(minutes=15)
"""A running attempt is stored out of ``by_state`` only if it started within this time of the
run's ``scheduled_for`` (``in_state_index``): ``running_unlisted_since`` bounds the read that finds
such runs by the ``by_task_keys`` index (``rebound migrate relist-running``)."""
UNLISTED_RUNNING_FOR = timedelta(hours=2)
"""How long a run stays ``running`` out of ``by_state`` at most, with room to spare: its lease
(at most 300 s and its grace) until its message comes back; at worst (keeping the message
invisible failed) the queue's 30-minute visibility timeout, then the executor's backoffs up to
``maxReceiveCount``, then the DLQ check that fails it (``rebound.engine.dlq_arrivals``)."""


def in_state_index(data: Mapping[str, Any]) -> bool:
    """Whether the ``by_state`` index lists a run (its stored form): every run but a clean success
    and a run running a clean attempt.

    Such a run is stored without the index's keys (DynamoDB: ``state`` and ``updated_at`` travel
    in ``doc``), so ``by_state`` is sparse, and a clean run never enters it: no entry at its claim,
    none to remove at its outcome (two index writes fewer).

    - A clean success: one that succeeded at the first attempt of its budget. A run that succeeded
      after a retry stays listed: the retry success rate reads it
      (``rebound.ops.recovery_view.recovery``).
    - A running attempt that nothing but its own message needs to watch: synchronous (an
      asynchronous one's heartbeats are checked by the sweeper), not ``watched`` (its task has no
      duration SLA the sweeper judges while it runs) and started within ``UNLISTED_CLAIM_WINDOW`` of
      its ``scheduled_for``. Its message is kept invisible until after its lease
      (``rebound.engine.executor.delivery``); a worker that dies leaves the message to come back
      then, and the executor fails the attempt (``rebound.engine.leases``). One still running
      after 10 s is put in the index then (``Attempts._list_if_long``), so listings of running
      runs show every run running longer; ``rebound migrate relist-running`` finds the others
      through ``by_task_keys`` (``running_unlisted_since``)."""
    state = data.get("state")
    if state == RunState.RUNNING.value:
        return not _unlisted_running(data)
    if state != RunState.SUCCEEDED.value:
        return True
    return int(data.get("attempt") or 0) > int(data.get("budget_start") or 0) + 1


def item_may_wait(run: Run) -> bool:
    """Whether ``run``'s item may not be written yet: a run created by its claim (running at its
    first revision) whose record was committed alone (``UnitOfWork.save_run``'s ``defer_item``).
    Its next write creates the item; a reader that finds none rolls it forward from the record."""
    return run.rev == 1 and run.state is RunState.RUNNING


def _unlisted_running(data: Mapping[str, Any]) -> bool:
    if data.get("async_token_id") or data.get("watched") or not data.get("lease_expires_at"):
        return False
    attempts = data.get("attempts") or []
    if not attempts or not attempts[-1].get("started_at") or not data.get("scheduled_for"):
        return False
    started = parse_utc(attempts[-1]["started_at"])
    return started - parse_utc(data["scheduled_for"]) <= UNLISTED_CLAIM_WINDOW


def unlisted_running(run: Run) -> bool:
    """``in_state_index``'s rule for a running run, read from the model: True if ``by_state``
    does not list it (a clean attempt, watched by its own message alone)."""
    return (
        run.state is RunState.RUNNING
        and run.async_token_id is None
        and not run.watched
        and run.lease_expires_at is not None
        and bool(run.attempts)
        and run.attempts[-1].started_at - run.scheduled_for <= UNLISTED_CLAIM_WINDOW
    )


def running_unlisted_since(now: datetime) -> datetime:
    """The earliest ``scheduled_for`` a run running out of ``by_state`` can have at ``now``."""
    return now - UNLISTED_CLAIM_WINDOW - UNLISTED_RUNNING_FOR


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
    watched: bool | None = Field(
        default=None,
        description="the running attempt is judged by the sweeper while it runs (its task has a "
        "duration SLA), so the run stays in the by_state index (in_state_index)",
    )
    by_fire: bool | None = Field(
        default=None,
        description="its claim found its fire owed by its task's schedule, so while it is a clean "
        "success it is listed with its task by that fire, not by_task_keys (found_by_fire)",
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
