"""The run state machine. Every state change goes through ``ensure_transition``."""

from __future__ import annotations

from datetime import datetime

from rebound.domain.errors import IllegalTransition
from rebound.domain.run import AttemptOutcome, Run, RunState

S = RunState

TRANSITIONS: dict[RunState, frozenset[RunState]] = {
    S.PENDING: frozenset({S.RUNNING, S.FAILED, S.DEAD_LETTERED, S.CANCELLED, S.SKIPPED}),
    S.RUNNING: frozenset({S.SUCCEEDED, S.FAILED, S.CANCELLED}),
    S.FAILED: frozenset({S.RETRY_SCHEDULED, S.DEAD_LETTERED, S.CANCELLED, S.SKIPPED}),
    S.RETRY_SCHEDULED: frozenset({S.RUNNING, S.DEAD_LETTERED, S.CANCELLED, S.SKIPPED}),
    S.DEAD_LETTERED: frozenset({S.REPLAYED, S.SKIPPED, S.CANCELLED, S.SUPERSEDED}),
    S.REPLAYED: frozenset({S.RUNNING, S.DEAD_LETTERED, S.CANCELLED, S.SKIPPED}),
    S.SUCCEEDED: frozenset(),
    S.SKIPPED: frozenset(),
    S.CANCELLED: frozenset(),
    S.SUPERSEDED: frozenset(),
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


def closed(run: Run, state: RunState, now: datetime) -> Run:
    """``run`` ended by hand (``cancelled`` or ``skipped``): nothing due, no lease, no slot, no
    wait, and a running attempt ended as cancelled. The caller leaves ``run.slots`` in the same
    transaction."""
    update: dict[str, object] = {
        "state": state,
        "next_retry_at": None,
        "lease_expires_at": None,
        "lease_owner": None,
        "slots": [],
        "waiting_since": None,
        "held_at": None,
    }
    if run.state is RunState.RUNNING and run.attempts:
        update["attempts"] = [
            *run.attempts[:-1],
            run.attempts[-1].model_copy(
                update={"ended_at": now, "outcome": AttemptOutcome.CANCELLED, "error_code": "CANCELLED"}
            ),
        ]
    return run.model_copy(update=update)
