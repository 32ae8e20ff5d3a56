"""The service level objectives, measured from the run ledger: what ``rebound slo`` prints.

Each SLO has a target, a window and the events it counts (good and bad). The current value is
good ÷ (good + bad) over the window ending now; the error budget left is the share of the allowed
bad events (``1 - target`` of them) not yet spent: 100 % with no bad event, 0 % once the bad
share reaches ``1 - target`` (and it stays 0, never negative). The alarms watch the same
definitions in CloudWatch (``infra/rebound_infra/constructs/observability.py``); here they are
read from the runs themselves, so the figures exist locally and after a metric was lost.

- retry success (≥ 90 % over 1 h): attempts after a run's first (retries, redrives, replays) that
  ended in the window, succeeded against failed or timed out;
- on-time (≥ 98 % over 1 h): first attempts due in the window, started within 60 s of when they
  were due (``due_at``), against those started later or not started though due over 60 s ago;
  catch-up runs (late by design) count as late;
- execution success (≥ 97 % over 1 h): every attempt that ended in the window;
- scheduling failure (≤ 5 % over 5 min): fires due in the window that were missed (the run
  ledger's catch-up runs and the fires it recorded skipped as missed) against every fire due.
  Failed retry dispatches are repaired by the sweeper and leave no trace on the run, so they are
  counted only by the alarm (``task.scheduling.failure_total``); the output says so.
- manual recovery completion (≥ 95 % over 7 days): work orders opened in the window, resolved.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from rebound.domain.run import AttemptOutcome, Run, RunState, Trigger
from rebound.engine import recovery
from rebound.engine import telemetry as m
from rebound.engine.deps import Deps

HOUR = timedelta(hours=1)
FIVE_MINUTES = timedelta(minutes=5)
MISSED_MARK = "missed fire (catch-up policy)"
"""How the run ledger marks a fire it recorded skipped because it was missed."""


@dataclass(frozen=True)
class Objective:
    name: str
    target: float
    """Percent of good events the SLO promises."""
    window: timedelta
    good: int
    bad: int
    note: str = ""
    higher_is_better: bool = True

    @property
    def total(self) -> int:
        return self.good + self.bad

    @property
    def current(self) -> float | None:
        """Percent of good events (of bad ones for a lower-is-better SLO); None with no event."""
        if not self.total:
            return None
        share = self.good if self.higher_is_better else self.bad
        return round(100.0 * share / self.total, 2)

    @property
    def met(self) -> bool | None:
        if self.current is None:
            return None
        return self.current >= self.target if self.higher_is_better else self.current <= self.target

    @property
    def budget_left(self) -> float | None:
        """Percent of the error budget not spent in the window; None with no event."""
        if not self.total:
            return None
        allowed = (100.0 - self.target) if self.higher_is_better else self.target
        bad_share = 100.0 * self.bad / self.total
        if allowed <= 0:
            return 0.0 if self.bad else 100.0
        return round(max(0.0, 100.0 * (1.0 - bad_share / allowed)), 2)

    @property
    def comparison_sign(self) -> str:
        return ">=" if self.higher_is_better else "<="

    def as_dict(self) -> dict[str, Any]:
        return {
            "slo": self.name,
            "target_percent": self.target,
            "comparison": self.comparison_sign,
            "window_s": int(self.window.total_seconds()),
            "current_percent": self.current,
            "met": self.met,
            "error_budget_left_percent": self.budget_left,
            "good": self.good,
            "bad": self.bad,
            "note": self.note,
        }


def _ended(run: Run, since: datetime, until: datetime) -> Iterable[tuple[int, AttemptOutcome]]:
    for attempt in run.attempts:
        if (
            attempt.ended_at is not None
            and attempt.outcome is not None
            and since <= attempt.ended_at <= until
        ):
            yield attempt.n, attempt.outcome


def is_missed(run: Run) -> bool:
    return run.catch_up or (
        run.state is RunState.SKIPPED and not run.attempts and run.last_error_message == MISSED_MARK
    )


class SloOps:
    def __init__(self, deps: Deps) -> None:
        self.deps = deps
        self.store = deps.store

    def _recent_runs(self, since: datetime) -> list[Run]:
        """Runs scheduled since ``since`` minus a day (a run's later attempts end long after its
        fire time), across every task."""
        runs: list[Run] = []
        for stored in self.store.list_tasks():
            runs += self.store.runs_for_task(
                stored.task.id, since=since - timedelta(days=1), newest_first=False
            )
        return runs

    def objectives(self, now: datetime | None = None) -> list[Objective]:
        now = now or self.deps.clock.now()
        hour_ago, five_ago = now - HOUR, now - FIVE_MINUTES
        runs = self._recent_runs(hour_ago)
        retry_good = retry_bad = exec_good = exec_bad = 0
        for run in runs:
            for n, outcome in _ended(run, hour_ago, now):
                ok = outcome is AttemptOutcome.SUCCEEDED
                exec_good += ok
                exec_bad += not ok and outcome is not AttemptOutcome.CANCELLED
                if n > 1:
                    retry_good += ok
                    retry_bad += not ok and outcome is not AttemptOutcome.CANCELLED
        on_time = late = 0
        for run in runs:
            due = run.due_at or run.scheduled_for
            if not (hour_ago <= due <= now) or run.trigger is not Trigger.SCHEDULE:
                continue
            if is_missed(run):
                late += 1
                continue
            first = run.attempts[0] if run.attempts else None
            if first is None:
                late += (now - due).total_seconds() > m.ON_TIME_WINDOW_S and run.state is not RunState.SKIPPED
                continue
            if (first.started_at - due).total_seconds() <= m.ON_TIME_WINDOW_S:
                on_time += 1
            else:
                late += 1
        fires = [r for r in runs if r.trigger is Trigger.SCHEDULE and five_ago <= r.scheduled_for <= now]
        missed = sum(1 for r in fires if is_missed(r))
        completion = recovery.completion(self.store, now)
        return [
            Objective("retry success", 90.0, HOUR, retry_good, retry_bad),
            Objective("on-time", 98.0, HOUR, on_time, late),
            Objective("execution success", 97.0, HOUR, exec_good, exec_bad),
            Objective(
                "scheduling failure",
                5.0,
                FIVE_MINUTES,
                len(fires) - missed,
                missed,
                note="missed fires only: failed retry dispatches are counted by the alarm's metrics",
                higher_is_better=False,
            ),
            Objective(
                "manual recovery completion",
                recovery.TARGET_PERCENT,
                recovery.WINDOW,
                completion.resolved,
                completion.opened - completion.resolved,
            ),
        ]
