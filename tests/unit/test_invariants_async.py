"""The simulator's invariants for asynchronous attempts fail when their rule is broken."""

from __future__ import annotations

from typing import Any

import pytest

from rebound_local.invariants import one_outcome_per_attempt, refused_reports_after_the_end

pytestmark = pytest.mark.unit


def record(seq: int, action: str, at: str, **evidence: Any) -> dict[str, Any]:
    return {"seq": seq, "action": action, "at": at, "evidence": evidence}


STARTED = record(1, "attempt-started", "2026-03-07T00:00:00.000Z", attempt=1)
SUCCEEDED = record(2, "attempt-succeeded", "2026-03-07T01:00:00.000Z", attempt=1)
TIMED_OUT = record(2, "lease-expired", "2026-03-07T00:06:00.000Z", attempt=1)


def test_an_attempt_that_ends_twice_breaks_one_outcome_per_attempt() -> None:
    assert one_outcome_per_attempt({"run#a": [STARTED, SUCCEEDED]}).ok
    broken = one_outcome_per_attempt({"run#a": [STARTED, TIMED_OUT, {**SUCCEEDED, "seq": 3}]})
    assert not broken.ok and "attempt 1" in broken.examples[0]


def test_a_refusal_before_the_attempt_ended_or_for_one_that_never_ended_is_caught() -> None:
    late = record(1, "report-refused", "2026-03-07T02:00:00.000Z", reason="timed_out", attempt=1)
    assert refused_reports_after_the_end({"run#a": [STARTED, TIMED_OUT], "reports#a": [late]}).ok

    early = record(1, "report-refused", "2026-03-07T00:01:00.000Z", reason="used", attempt=1)
    assert not refused_reports_after_the_end({"run#a": [STARTED, SUCCEEDED], "reports#a": [early]}).ok
    assert not refused_reports_after_the_end({"run#a": [STARTED], "reports#a": [late]}).ok
