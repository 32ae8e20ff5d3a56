"""The run state machine refuses every transition it does not allow."""

from __future__ import annotations

import itertools

import pytest

from rebound.domain.errors import IllegalTransition
from rebound.domain.run import RunState as S
from rebound.domain.states import ACTIVE, CLAIMABLE, TERMINAL, TRANSITIONS, can_transition, ensure_transition

pytestmark = pytest.mark.unit

ALLOWED = {
    (S.PENDING, S.RUNNING),
    (S.RUNNING, S.SUCCEEDED),
    (S.RUNNING, S.FAILED),
    (S.FAILED, S.RETRY_SCHEDULED),
    (S.RETRY_SCHEDULED, S.RUNNING),
    (S.FAILED, S.DEAD_LETTERED),
    (S.DEAD_LETTERED, S.REPLAYED),
    (S.DEAD_LETTERED, S.SKIPPED),
    (S.DEAD_LETTERED, S.CANCELLED),
    (S.REPLAYED, S.RUNNING),
}


def test_the_documented_lifecycle_is_allowed() -> None:
    for current, new in ALLOWED:
        ensure_transition(current, new)


@pytest.mark.parametrize(
    "current,new", [(a, b) for a, b in itertools.product(S, S) if not can_transition(a, b)]
)
def test_every_other_transition_raises_a_domain_error(current: S, new: S) -> None:
    with pytest.raises(IllegalTransition) as err:
        ensure_transition(current, new, "run#x")
    assert err.value.code == "ILLEGAL_TRANSITION"
    assert err.value.details == {"current": current.value, "requested": new.value, "subject": "run#x"}


def test_finished_states_have_no_way_out() -> None:
    assert {S.SUCCEEDED, S.SKIPPED, S.CANCELLED, S.SUPERSEDED} == TERMINAL
    for state in TERMINAL:
        assert not TRANSITIONS[state]


def test_success_is_never_undone() -> None:
    assert all(not can_transition(S.SUCCEEDED, other) for other in S)


def test_only_pending_scheduled_or_replayed_runs_can_start_an_attempt() -> None:
    assert {s for s in S if can_transition(s, S.RUNNING)} == CLAIMABLE
    assert CLAIMABLE <= ACTIVE
