"""The crash plan: named points, a rate, a limit per point, and a crash takes its invocation down."""

from __future__ import annotations

import random
from datetime import UTC, datetime

import pytest

from rebound_local.instrument import CrashPlan, SimulatedCrash
from rebound_local.invocations import Invocation, Lane, working_for

pytestmark = pytest.mark.unit


def test_a_limit_of_one_crashes_on_the_first_hit_only() -> None:
    plan = CrashPlan(frozenset({"after_wait"}), rate=1.0, seed=1, limit=1)
    with pytest.raises(SimulatedCrash):
        plan.reached("after_wait")
    for _ in range(5):
        plan.reached("after_wait")
    plan.reached("after_claim")  # not a planned point
    assert plan.crashes == {"after_wait": 1}


def test_without_a_limit_every_hit_may_crash() -> None:
    plan = CrashPlan(frozenset({"after_wait"}), rate=1.0, seed=1)
    for _ in range(3):
        with pytest.raises(SimulatedCrash):
            plan.reached("after_wait")
    assert plan.crashes == {"after_wait": 3}


def test_a_crash_abandons_the_invocation_it_happens_in() -> None:
    invocation = Invocation("executor", datetime(2026, 3, 7, tzinfo=UTC))
    plan = CrashPlan(frozenset({"after_target"}), rate=1.0)
    with working_for(Lane(invocation, random.Random(0))), pytest.raises(SimulatedCrash):
        plan.reached("after_target")
    assert invocation.reason == "crash"
    with pytest.raises(SimulatedCrash):
        invocation.check()  # every other thread of it now stops at its next AWS call
