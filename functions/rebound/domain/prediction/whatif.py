"""Policy what-if: replay recorded failures under another retry policy. Pure computation.

The record says, for each task, when its target answered and how: every attempt of every run,
with its start, end and outcome. ``Timeline`` turns that into the target's state at any moment,
as the task saw it: the outcome of the latest attempt that started at or before it (a failure
lasts until the next recorded success). A run with at least one failed attempt in the window is
replayed from its first failed attempt, as ``rebound.domain.retry`` would decide it: terminal
errors go straight to the dead letters, the policy's backoff (``rebound.domain.backoff``; jitter
drawn per run and attempt from a fixed seed, so a replay is repeatable) sets when the next attempt
goes, ``max_attempts`` and ``max_age`` end it, and the next attempt's outcome is the timeline's
at that moment. The same replay runs for the current policy and the proposed one, so their
figures compare like with like.

What it does not model: retry budgets per target (held runs), slots and waits, the queues'
latency; an attempt takes the duration its recorded counterpart took (the last one recorded).
The cost of a retry and of a dead letter are the measured figures of ``docs/cost.md`` (dollars
per million: a run with one retry less a clean run; a dead-lettered run less a clean run and its
two retries).
"""

from __future__ import annotations

import bisect
import math
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta

from pydantic import BaseModel, Field

from rebound.domain.backoff import delay_for_attempt, should_schedule_retry
from rebound.domain.retry import is_terminal, jitter_rng
from rebound.domain.retry_policy import RetryPolicy
from rebound.domain.run import Attempt, AttemptOutcome, Run
from rebound.domain.timefmt import iso

RETRY_COST_USD = (50.79 - 16.05) / 1e6
"""One retry (docs/cost.md, measured 2026-11-23: a run with one retry less a clean run)."""
DEAD_LETTER_COST_USD = (134.85 - 16.05 - 2 * (50.79 - 16.05)) / 1e6
"""One dead letter beyond its attempts: the DLQ message, its record, the work order."""
REPLAY_SEED = 0
MAX_REPLAYED_ATTEMPTS = 100
LATE = timedelta(seconds=60)
"""A retry starts up to this late after it is due (the queue, the claim): an answer recorded that
much after the moment still counts as the answer at that moment."""


@dataclass(frozen=True)
class Sample:
    at: datetime
    ok: bool
    error_code: str | None
    retryable: bool


def _ended(run: Run) -> list[Attempt]:
    """The attempts that ended with an answer from the target (not running, not cancelled)."""
    return [a for a in run.attempts if a.outcome not in (AttemptOutcome.RUNNING, AttemptOutcome.CANCELLED)]


class Timeline:
    """A task's target, as its recorded attempts saw it."""

    def __init__(self, runs: list[Run]) -> None:
        samples = [
            Sample(
                a.started_at, a.outcome is AttemptOutcome.SUCCEEDED, a.error_code, a.retryable is not False
            )
            for run in runs
            for a in run.attempts
            if a.outcome not in (AttemptOutcome.RUNNING, AttemptOutcome.CANCELLED)
        ]
        self.samples = sorted(samples, key=lambda s: s.at)
        self.times = [s.at for s in self.samples]

    def at(self, moment: datetime) -> Sample | None:
        """The latest recorded answer at or before ``moment`` (up to ``LATE`` after it; None:
        nothing recorded before)."""
        i = bisect.bisect_right(self.times, moment + LATE)
        return self.samples[i - 1] if i else None


class Figures(BaseModel):
    """One policy's replay of the recorded failures."""

    runs: int = Field(description="runs with a failed attempt in the window")
    recovered: int = Field(description="would have succeeded on a retry")
    dead_lettered: int
    retries: int = Field(description="retry attempts (messages) the policy would have sent")
    retries_per_hour: float
    peak_retries_per_hour: int
    recovery_p50_s: float | None = Field(description="first failure to success, recovered runs")
    recovery_p99_s: float | None
    cost_usd: float = Field(description="retries and dead letters at the measured unit costs")


class WhatIf(BaseModel):
    policy: str
    since: str
    until: str
    changes: dict[str, object]
    current: Figures
    proposed: Figures
    added_cost_usd: float
    notes: list[str] = Field(default_factory=list)


@dataclass
class _Outcome:
    recovered_after_s: float | None
    retries: list[datetime]


def _replay(run: Run, timeline: Timeline, policy: RetryPolicy) -> _Outcome | None:
    attempts = [
        a for a in run.attempts if a.outcome not in (AttemptOutcome.RUNNING, AttemptOutcome.CANCELLED)
    ]
    first_failed = next(
        (i for i, a in enumerate(attempts) if a.outcome is not AttemptOutcome.SUCCEEDED), None
    )
    if first_failed is None:
        return None
    start = attempts[first_failed]
    started = start.started_at
    took = timedelta(milliseconds=start.duration_ms or 0)
    ended = start.ended_at or started + took
    code, retryable = start.error_code, start.retryable is not False
    retries: list[datetime] = []
    previous: float | None = None
    for n in range(1, MAX_REPLAYED_ATTEMPTS + 1):
        if is_terminal(policy, code, retryable) or not should_schedule_retry(policy, n):
            return _Outcome(None, retries)
        delay = delay_for_attempt(policy, n, jitter_rng(REPLAY_SEED, run.run_id, n), previous)
        previous = delay
        due = ended + timedelta(seconds=delay)
        if policy.max_age is not None and (due - started).total_seconds() > policy.max_age:
            return _Outcome(None, retries)
        retries.append(due)
        answer = timeline.at(due)
        if answer is None or answer.ok:
            return _Outcome((due - started).total_seconds(), retries)
        code, retryable = answer.error_code, answer.retryable
        ended = due + took
    return _Outcome(None, retries)


def _percentile(ordered: list[float], pct: float) -> float | None:
    if not ordered:
        return None
    return ordered[max(1, math.ceil(pct / 100.0 * len(ordered))) - 1]


Replayed = list[tuple[list[Run], RetryPolicy]]
"""Each task's recorded runs, with the policy its retries would follow."""


def figures(tasks: Replayed, since: datetime, until: datetime) -> Figures:
    """Replay every run with a failed attempt under its task's policy."""
    replayed = 0
    recovered: list[float] = []
    dead = 0
    retries: list[datetime] = []
    for runs, policy in tasks:
        timeline = Timeline(runs)
        for run in runs:
            outcome = _replay(run, timeline, policy)
            if outcome is None:
                continue
            replayed += 1
            retries += outcome.retries
            if outcome.recovered_after_s is None:
                dead += 1
            else:
                recovered.append(outcome.recovered_after_s)
    hours = max((until - since).total_seconds() / 3600.0, 1 / 60)
    per_hour = Counter(at.replace(minute=0, second=0, microsecond=0) for at in retries)
    recovered.sort()
    p50, p99 = _percentile(recovered, 50), _percentile(recovered, 99)
    return Figures(
        runs=replayed,
        recovered=len(recovered),
        dead_lettered=dead,
        retries=len(retries),
        retries_per_hour=round(len(retries) / hours, 3),
        peak_retries_per_hour=max(per_hour.values(), default=0),
        recovery_p50_s=round(p50, 3) if p50 is not None else None,
        recovery_p99_s=round(p99, 3) if p99 is not None else None,
        cost_usd=round(len(retries) * RETRY_COST_USD + dead * DEAD_LETTER_COST_USD, 9),
    )


def what_if(
    name: str,
    current: Replayed,
    proposed: Replayed,
    changes: dict[str, object],
    since: datetime,
    until: datetime,
) -> WhatIf:
    """The figures of the current and the proposed policy over the same recorded runs."""
    now_figures = figures(current, since, until)
    then = figures(proposed, since, until)
    notes = [
        "replays recorded attempts: a retry's outcome is what the task's target answered at that "
        "moment; retry budgets per target, waits and queue latency are not modelled"
    ]
    if not now_figures.runs:
        notes.append("no run of a task using this policy failed in the window: nothing to replay")
    return WhatIf(
        policy=name,
        since=iso(since),
        until=iso(until),
        changes=changes,
        current=now_figures,
        proposed=then,
        added_cost_usd=round(then.cost_usd - now_figures.cost_usd, 9),
        notes=notes,
    )
