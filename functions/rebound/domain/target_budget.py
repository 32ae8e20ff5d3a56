"""Retry budgets per target: the rules, as pure functions of a target's state.

A target is what a task calls: an http host, a lambda function, a sim target's ``name`` (default
its task id). Its state is one small record (``TargetState``); the engine reads it, applies one of
these functions and writes it back only over the version it read
(``rebound.engine.target_budgets``).

- **healthy**: each failure a retry would follow is counted in a sliding window (the failures'
  times and runs, at most ``threshold`` of them). When ``threshold`` failures of at least
  ``min_runs`` runs fall within ``window``, the target *trips*: it is unhealthy from now on, a new
  episode begins (one work order per episode), and the run whose failure tripped it is held.
- **unhealthy**: every failure is held: the run waits (reason ``target-unhealthy``) without a
  retry, and the failed attempt does not count against its budget. Every ``probe_every`` one held
  run is let through as the *probe*. A probe that fails is held again; a probe that succeeds
  makes the target *recovering*.
- **recovering**: held runs are released, at most ``release_per_minute`` a minute, spread over
  the minute; failures are counted again from zero and trip the target again (the same episode,
  its work order still open). Once nothing is held any more the target is healthy again and its
  work order resolves itself.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from enum import StrEnum

from pydantic import BaseModel, Field

from rebound.domain.retry_policy import TargetBudget
from rebound.domain.target_specs import HttpTarget, LambdaTarget, SimTarget
from rebound.domain.task import Task
from rebound.domain.timefmt import UtcDatetime

TARGET_UNHEALTHY = "target-unhealthy"
"""The wait reason of a run held because its target is unhealthy."""
TARGET_UNHEALTHY_CODE = "TARGET_UNHEALTHY"
"""The error code of a run dead-lettered because it was held longer than ``max_hold``."""


def target_identity(task: Task) -> str:
    """What the task calls, as one name: ``http:<host>``, ``lambda:<function>``, ``sim:<name>``."""
    target = task.target
    if isinstance(target, HttpTarget):
        return f"http:{target.host}"
    if isinstance(target, LambdaTarget):
        function = target.function
        if function.startswith("arn:"):
            # arn:aws:lambda:region:account:function:name[:qualifier]
            parts = function.split(":")
            function = parts[6] if len(parts) > 6 else function
        return f"lambda:{function}"
    assert isinstance(target, SimTarget)
    return f"sim:{target.name or task.id}"


class Health(StrEnum):
    HEALTHY = "healthy"
    UNHEALTHY = "unhealthy"
    RECOVERING = "recovering"


class Verdict(StrEnum):
    RETRY = "retry"
    """Count it and retry as the policy says."""
    HOLD = "hold"
    """Hold the run: the target is unhealthy."""
    TRIP = "trip"
    """This failure made the target unhealthy: hold the run, open the target's work order."""


class Failure(BaseModel):
    at: UtcDatetime
    run_id: str


class TargetState(BaseModel):
    """One target's budget (a control record, written only over the version read)."""

    target: str
    health: Health = Health.HEALTHY
    failures: list[Failure] = Field(default_factory=list, description="the latest, within the window")
    episode: int = Field(default=0, ge=0, description="times it tripped from healthy: one work order each")
    tripped_at: UtcDatetime | None = None
    probe_at: UtcDatetime | None = Field(default=None, description="when the next probe may go")
    probe_run: str | None = Field(default=None, description="the run let through as the latest probe")
    probes: int = Field(default=0, ge=0, description="probes sent in this episode")
    recovering_since: UtcDatetime | None = None
    release_minute: int = Field(default=0, description="the minute (epoch minutes) releases were taken in")
    released: int = Field(default=0, ge=0, description="held runs released in that minute")
    work_order_id: str | None = None
    changed_at: UtcDatetime | None = None

    @property
    def healthy(self) -> bool:
        return self.health is Health.HEALTHY


def order_subject(target: str, episode: int) -> str:
    """The subject of a target's work order for one episode (one order per episode)."""
    return f"target#{target}#{episode}"


def record_failure(
    state: TargetState, run_id: str, now: datetime, budget: TargetBudget, *, counted: bool = True
) -> tuple[TargetState, Verdict]:
    """A failure of ``run_id`` on this target that a retry would follow: the new state, and what
    to do with the run. An unhealthy target's state changes only when the failure is its probe's.
    A failure that says nothing of the target (``counted=False``: its worker died) is held while
    the target is unhealthy, like any other, but is not counted toward a trip."""
    if state.health is Health.UNHEALTHY:
        if state.probe_run == run_id:
            return state.model_copy(update={"probe_run": None, "changed_at": now}), Verdict.HOLD
        return state, Verdict.HOLD
    if not counted:
        return state, Verdict.RETRY
    since = now - timedelta(seconds=budget.window)
    recent = [f for f in state.failures if f.at > since]
    recent = [*recent, Failure(at=now, run_id=run_id)][-budget.threshold :]
    runs = {f.run_id for f in recent}
    if len(recent) >= budget.threshold and len(runs) >= budget.min_runs:
        fresh = state.health is Health.HEALTHY
        tripped = state.model_copy(
            update={
                "health": Health.UNHEALTHY,
                "failures": recent,
                "episode": state.episode + 1 if fresh else state.episode,
                "tripped_at": now,
                "probe_at": now + timedelta(seconds=budget.probe_every),
                "probe_run": None,
                "probes": 0 if fresh else state.probes,
                "recovering_since": None,
                "changed_at": now,
            }
        )
        return tripped, Verdict.TRIP
    return state.model_copy(update={"failures": recent, "changed_at": now}), Verdict.RETRY


def probe_due(state: TargetState, now: datetime) -> bool:
    return state.health is Health.UNHEALTHY and (state.probe_at is None or state.probe_at <= now)


def take_probe(state: TargetState, run_id: str, now: datetime, budget: TargetBudget) -> TargetState:
    return state.model_copy(
        update={
            "probe_run": run_id,
            "probe_at": now + timedelta(seconds=budget.probe_every),
            "probes": state.probes + 1,
            "changed_at": now,
        }
    )


def recovered(state: TargetState, now: datetime) -> TargetState:
    """The probe succeeded: release the held runs, paced."""
    return state.model_copy(
        update={
            "health": Health.RECOVERING,
            "failures": [],
            "probe_run": None,
            "recovering_since": now,
            "changed_at": now,
        }
    )


def releases_left(state: TargetState, now: datetime, budget: TargetBudget) -> int:
    """How many held runs may still be released in the current minute."""
    minute = int(now.timestamp()) // 60
    taken = state.released if state.release_minute == minute else 0
    return max(budget.release_per_minute - taken, 0)


def take_releases(state: TargetState, count: int, now: datetime) -> TargetState:
    minute = int(now.timestamp()) // 60
    taken = state.released if state.release_minute == minute else 0
    return state.model_copy(update={"release_minute": minute, "released": taken + count, "changed_at": now})


def closed(state: TargetState, now: datetime) -> TargetState:
    """Nothing is held any more: the target is healthy again (its work order resolves)."""
    return state.model_copy(
        update={
            "health": Health.HEALTHY,
            "failures": [],
            "probe_at": None,
            "probe_run": None,
            "recovering_since": None,
            "work_order_id": None,
            "changed_at": now,
        }
    )


def release_times(count: int, now: datetime) -> list[datetime]:
    """When each of ``count`` runs released in one go is due: spread evenly over the next minute."""
    step = 60.0 / max(count, 1)
    return [now + timedelta(seconds=round(i * step, 3)) for i in range(count)]
