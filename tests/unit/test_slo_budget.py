"""An SLO's current value and error budget left (``rebound.ops.slo.Objective``)."""

from __future__ import annotations

import pytest

from rebound.ops.slo import HOUR, Objective

pytestmark = pytest.mark.unit


def test_half_the_allowed_failures_leaves_half_the_budget() -> None:
    slo = Objective("retry success", 90.0, HOUR, good=95, bad=5)  # 5 % bad of the 10 % allowed
    assert (slo.current, slo.budget_left, slo.met) == (95.0, 50.0, True)


def test_a_spent_budget_is_zero_not_negative_and_the_slo_is_missed() -> None:
    slo = Objective("execution success", 97.0, HOUR, good=80, bad=20)
    assert (slo.current, slo.budget_left, slo.met) == (80.0, 0.0, False)


def test_a_lower_is_better_slo_reports_the_bad_share_against_its_ceiling() -> None:
    slo = Objective("scheduling failure", 5.0, HOUR, good=99, bad=1, higher_is_better=False)
    assert (slo.current, slo.budget_left, slo.met) == (1.0, 80.0, True)
    assert Objective("scheduling failure", 5.0, HOUR, 90, 10, higher_is_better=False).met is False


def test_no_event_is_no_value_and_no_verdict() -> None:
    slo = Objective("on-time", 98.0, HOUR, good=0, bad=0)
    assert (slo.current, slo.budget_left, slo.met) == (None, None, None)
    assert slo.as_dict()["current_percent"] is None
