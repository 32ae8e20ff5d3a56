"""The run state machine. Every state change goes through ``ensure_transition``."""

from __future__ import annotations

from rebound.domain.errors import IllegalTransition
from rebound.domain.models import RunState

S = RunState

TRANSITIONS: dict[RunState, frozenset[RunState]] = {
    S.PENDING: frozenset({S.RUNNING, S.FAILED, S.DEAD_LETTERED, S.CANCELLED, S.SKIPPED}),
    S.RUNNING: frozenset({S.SUCCEEDED, S.FAILED, S.CANCELLED}),
    S.FAILED: frozenset({S.RETRY_SCHEDULED, S.DEAD_LETTERED, S.CANCELLED, S.SKIPPED}),
    S.RETRY_SCHEDULED: frozenset({S.RUNNING, S.DEAD_LETTERED, S.CANCELLED, S.SKIPPED}),
    S.DEAD_LETTERED: frozenset({S.REPLAYED, S.SKIPPED, S.CANCELLED}),
    S.REPLAYED: frozenset({S.RUNNING, S.DEAD_LETTERED, S.CANCELLED, S.SKIPPED}),
    S.SUCCEEDED: frozenset(),
    S.SKIPPED: frozenset(),
    S.CANCELLED: frozenset(),
}

TERMINAL: frozenset[RunState] = frozenset(state for state, nxt in TRANSITIONS.items() if not nxt)
CLAIMABLE: frozenset[RunState] = frozenset({S.PENDING, S.RETRY_SCHEDULED, S.REPLAYED})
"""States from which the executor may start the next attempt."""

ACTIVE: frozenset[RunState] = frozenset({S.PENDING, S.RUNNING, S.FAILED, S.RETRY_SCHEDULED, S.REPLAYED})
"""States in which Rebound still owes the run some work; the sweeper watches these."""


def can_transition(current: RunState, new: RunState) -> bool:
    return new in TRANSITIONS[current]


def ensure_transition(current: RunState, new: RunState, subject: str = "") -> None:
    if not can_transition(current, new):
        raise IllegalTransition(current.value, new.value, subject)
