"""Which runs the sparse ``by_state`` index lists (``rebound.domain.run.in_state_index``), and
that the model's reading of the rule (``unlisted_running``) agrees with the stored form's."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from rebound.domain.run import (
    Attempt,
    AttemptOutcome,
    Run,
    RunState,
    Trigger,
    in_state_index,
    unlisted_running,
)

FIRE = datetime(2026, 3, 7, 9, 0, tzinfo=UTC)


def run(state: RunState, started: datetime = FIRE, **fields: Any) -> Run:
    attempt = fields.pop("attempt", 1)
    return Run(
        run_id="acme.job:20260307T090000Z",
        task_id="acme.job",
        tenant="acme",
        trigger=Trigger.SCHEDULE,
        scheduled_for=FIRE,
        created_at=FIRE,
        updated_at=started,
        state=state,
        attempt=attempt,
        attempts=[
            Attempt(n=n, started_at=started, outcome=AttemptOutcome.RUNNING) for n in range(1, attempt + 1)
        ],
        lease_expires_at=started + timedelta(seconds=60) if state is RunState.RUNNING else None,
        **fields,
    )


@pytest.mark.parametrize(
    ("stored", "listed"),
    [
        (run(RunState.RUNNING), False),  # a clean attempt: its message watches it
        (run(RunState.RUNNING, attempt=2), False),  # a retry soon after the fire: the same
        (run(RunState.RUNNING, async_token_id="t1"), True),  # the sweeper checks its heartbeats
        (run(RunState.RUNNING, watched=True), True),  # the sweeper judges its duration SLA
        (run(RunState.RUNNING, FIRE + timedelta(minutes=16)), True),  # started long after its fire
        (run(RunState.RUNNING, FIRE + timedelta(minutes=15)), False),  # at the window's edge
        (run(RunState.SUCCEEDED), False),  # a clean success
        (run(RunState.SUCCEEDED, attempt=2), True),  # a success after a retry
        (run(RunState.FAILED), True),
        (run(RunState.PENDING, attempt=0), True),
        (run(RunState.DEAD_LETTERED), True),
    ],
)
def test_the_index_lists_every_run_but_a_clean_success_and_a_clean_attempt_running(
    stored: Run, listed: bool
) -> None:
    assert in_state_index(stored.model_dump(mode="json")) is listed
    if stored.state is RunState.RUNNING:
        assert unlisted_running(stored) is not listed


def test_a_running_run_without_a_lease_is_listed() -> None:
    """Written by a version before leases were kept in the run: whatever wrote it, the sweeper sees it."""
    data = run(RunState.RUNNING).model_dump(mode="json")
    data["lease_expires_at"] = None
    assert in_state_index(data)
