"""The retry budgets per target, as an operator sees them: ``rebound targets`` and ``GET /targets``.

During an outage the first questions are which dependencies Rebound has stopped spending
attempts on, since when, how many runs it holds for each, when the next probe goes, and which
work order tracks it. This module answers them from the targets' own records
(``rebound.engine.target_budgets``) without changing anything: the sweeper alone probes,
releases and closes.

- ``listing()``: every target that is not healthy (the index of unhealthy targets), one line each.
- ``show(target)``: one target's record, the runs held for it (found as the sweeper finds them:
  ``retry_scheduled`` runs held with the reason ``target-unhealthy`` whose task calls this
  target) and its recent history (the audit records on the target's chain).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from rebound.domain import target_budget as tb
from rebound.domain.errors import NotFound, ValidationFailed
from rebound.domain.run import Run, RunState
from rebound.engine.deps import Deps
from rebound.engine.target_budgets import TargetBudgets, held_by_target, state_key
from rebound.ops.common import age_s, when

HELD_AT_MOST = 200
"""How many held runs ``show`` lists by default (the count of the episode is on the record)."""
HISTORY = 20
"""How many of the target's latest audit records ``show`` returns."""


def _target_name(text: str) -> str:
    name = text.strip()
    kind, sep, rest = name.partition(":")
    if not sep or kind not in ("http", "lambda", "sim", "task") or not rest:
        raise ValidationFailed(
            f"target: expected http:<host>, lambda:<function> or sim:<name> (as `rebound targets` "
            f"lists them), got {text!r}",
            key_path="target",
        )
    return name


@dataclass
class TargetSummary:
    state: tb.TargetState
    now: datetime
    held: int
    """Runs held for the target now."""

    @property
    def next_probe_in_s(self) -> float | None:
        if self.state.health is not tb.Health.UNHEALTHY or self.state.probe_at is None:
            return None
        return max(round((self.state.probe_at - self.now).total_seconds(), 3), 0.0)

    def as_dict(self) -> dict[str, Any]:
        s = self.state
        return {
            "target": s.target,
            "health": s.health.value,
            "episode": s.episode,
            "tripped_at": when(s.tripped_at),
            "unhealthy_for_s": age_s(self.now, s.tripped_at) if not s.healthy else None,
            "recovering_since": when(s.recovering_since),
            "failures_in_window": len(s.failures),
            "held": self.held,
            "probes": s.probes,
            "probe_run": s.probe_run,
            "next_probe_at": when(s.probe_at) if s.health is tb.Health.UNHEALTHY else None,
            "next_probe_in_s": self.next_probe_in_s,
            "work_order_id": s.work_order_id,
            "changed_at": when(s.changed_at),
        }


@dataclass
class TargetDetail:
    summary: TargetSummary
    held: list[Run] = field(default_factory=list)
    held_truncated: bool = False
    history: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        now = self.summary.now
        return {
            **self.summary.as_dict(),
            "held_runs": [
                {
                    "run_id": run.run_id,
                    "task_id": run.task_id,
                    "state": run.state.value,
                    "attempt": run.attempt,
                    "held_at": when(run.held_at),
                    "held_for_s": age_s(now, run.held_at),
                    "last_error_code": run.last_error_code,
                }
                for run in self.held
            ],
            "held_truncated": self.held_truncated,
            "history": self.history,
        }


class TargetsOps:
    def __init__(self, deps: Deps) -> None:
        self.deps = deps
        self.budgets = TargetBudgets(deps, "operator")

    def listing(self) -> list[TargetSummary]:
        """Every target that is unhealthy or recovering, the longest unhealthy first."""
        now = self.deps.clock.now()
        names, _ = self.budgets.unhealthy()
        held = self._held()
        states = [self.budgets.read(name)[0] for name in sorted({*names, *held})]
        states.sort(key=lambda s: (s.tripped_at is None, s.tripped_at or now, s.target))
        return [TargetSummary(state, now, len(held.get(state.target, []))) for state in states]

    def show(self, target: str, *, at_most: int = HELD_AT_MOST) -> TargetDetail:
        name = _target_name(target)
        if not 1 <= at_most <= 1000:
            raise ValidationFailed(f"at_most: expected 1 to 1000, got {at_most}", key_path="at_most")
        state, version = self.budgets.read(name)
        if version is None:
            raise NotFound(
                f"target {name!r} has no retry-budget record: none of its failures was counted yet "
                f"(`rebound targets` lists the targets that are not healthy)"
            )
        held = self._held().get(name, [])
        detail = TargetDetail(TargetSummary(state, self.deps.clock.now(), len(held)))
        detail.held, detail.held_truncated = held[:at_most], len(held) > at_most
        trail = self.deps.store.audit_trail(state_key(name))[-HISTORY:]
        detail.history = [
            {"at": when(r.at), "action": r.action, "actor": r.actor, "evidence": r.evidence}
            for r in reversed(trail)
        ]
        return detail

    def _held(self) -> dict[str, list[Run]]:
        """The runs held now, by target, oldest first (as the sweeper finds them)."""
        store = self.deps.store
        identity: dict[str, str] = {}

        def target_of(task_id: str) -> str:
            if task_id not in identity:
                stored = store.get_task(task_id)
                identity[task_id] = tb.target_identity(stored.task) if stored else f"task:{task_id}"
            return identity[task_id]

        held: dict[str, list[Run]] = {}
        # A hold leaves its run retry_scheduled (TargetBudgets._stage_hold), and a release clears
        # the hold: no other waiting state can hold a run for its target.
        for run in store.runs_in_state(RunState.RETRY_SCHEDULED):
            if held_by_target(run):
                held.setdefault(target_of(run.task_id), []).append(run)
        for runs in held.values():
            runs.sort(key=lambda r: (r.held_at or r.updated_at, r.run_id))
        return held
