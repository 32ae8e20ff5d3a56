"""Upgrading a deployed stack to the sparse ``by_state`` index, on the local cloud, as
docs/deploy.md (*Upgrading*) says to do it on AWS:

1. the stack as an earlier version left it: every run in ``by_state``, runs of every state;
2. the deploy of this version: nothing of the table changes; runs written before read as they did,
   and a run that succeeds at its first attempt from now on is stored out of the index;
3. ``rebound migrate state-index``: the clean successes written before leave the index too.

No run is lost or changed, every chain verifies, ``state check`` finds nothing, and the pass is
idempotent.
"""

from __future__ import annotations

from typing import Any

import boto3
import pytest

from rebound import resources as r
from rebound.adapters.dynamo import codec
from rebound.domain.retention import Retention
from rebound.domain.run import Attempt, AttemptOutcome, Run, RunState
from rebound.engine.deps import Deps
from rebound.ops.audit import AuditOps
from rebound.ops.layout import migrate_state_index
from rebound.ops.state import StateOps
from rebound.settings import Settings
from support import ManualClock, ended_run, new_run

pytestmark = pytest.mark.integration


def retried_success(deps: Deps, run_id: str) -> Run:
    """A run that failed its first attempt and succeeded at its second: it stays in the index."""
    run = ended_run(deps, run_id, RunState.FAILED)
    now = deps.clock.now()
    second = Attempt(n=2, started_at=now, ended_at=now, outcome=AttemptOutcome.SUCCEEDED)
    update = {"state": RunState.SUCCEEDED, "attempt": 2, "attempts": [*run.attempts, second]}
    uow = deps.store.unit_of_work("test", now)
    run = uow.save_run(run, run.model_copy(update=update), action="succeeded")
    uow.commit()
    return run


def indexed(deps: Deps, state: RunState) -> set[str]:
    return {run.run_id for run in deps.store.runs_in_state(state)}


def raw_runs(aws: boto3.session.Session, settings: Settings) -> dict[str, dict[str, Any]]:
    pages = aws.client("dynamodb").get_paginator("scan").paginate(TableName=settings.table("runs"))
    return {item["run_id"]["S"]: item for page in pages for item in page["Items"]}


def test_a_stack_of_the_earlier_layout_upgrades_and_its_clean_successes_leave_the_index(
    aws: boto3.session.Session,
    settings: Settings,
    clock: ManualClock,
    deps: Deps,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    deps.store.retention = Retention()  # type: ignore[attr-defined]  # finished runs carry a ttl
    # The earlier version: every run stored with the index's keys.
    with monkeypatch.context() as earlier:
        earlier.setattr(codec, "in_state_index", lambda data: True)
        new_run(deps, "r-pending")
        for state in RunState:
            if state is not RunState.PENDING:
                clock.advance(1)
                ended_run(deps, f"r-{state.value}", state)
        clock.advance(1)
        retried_success(deps, "r-retried")
    before = {run.run_id: run for run in deps.store.scan_runs()}
    assert len(before) == len(RunState) + 1
    assert indexed(deps, RunState.SUCCEEDED) == {"r-succeeded", "r-retried"}
    for state in RunState:
        assert f"r-{state.value}" in indexed(deps, state)

    # This version deployed: the runs written before read as they did; a clean success from now
    # on is out of the index; a retried one is in it.
    clock.advance(1)
    ended_run(deps, "r-clean-now", RunState.SUCCEEDED)
    clock.advance(1)
    retried_success(deps, "r-retried-now")
    for run_id, run in before.items():
        assert deps.store.get_run(run_id) == run
    assert deps.store.get_run("r-clean-now").state is RunState.SUCCEEDED  # type: ignore[union-attr]
    assert indexed(deps, RunState.SUCCEEDED) == {"r-succeeded", "r-retried", "r-retried-now"}
    raw = raw_runs(aws, settings)
    assert "state" not in raw["r-clean-now"] and "updated_at" not in raw["r-clean-now"]
    assert raw["r-retried-now"]["state"] == {"S": "succeeded"}

    # The migration: a dry run counts, the pass moves what the earlier version wrote, once.
    dry = migrate_state_index(deps, dry_run=True)
    assert (dry.examined, dry.matched, dry.changed) == (len(RunState) + 3, 2, 2)
    assert indexed(deps, RunState.SUCCEEDED) == {"r-succeeded", "r-retried", "r-retried-now"}
    seen: list[int] = []
    report = migrate_state_index(deps, progress=seen.append)
    assert (report.matched, report.changed, report.skipped) == (2, 1, 1)  # r-clean-now was out
    assert sum(seen) == len(RunState) + 3
    assert indexed(deps, RunState.SUCCEEDED) == {"r-retried", "r-retried-now"}
    moved = raw_runs(aws, settings)["r-succeeded"]
    assert "state" not in moved and "updated_at" not in moved
    assert moved[r.RECORD_TTL] == raw["r-succeeded"][r.RECORD_TTL]  # its expiry kept
    again = migrate_state_index(deps)
    assert (again.changed, again.skipped) == (0, 2)

    # Nothing lost or changed: every run reads as before, every chain verifies, state check is clean.
    for run_id, run in before.items():
        assert deps.store.get_run(run_id) == run
    for state in RunState:
        expected = {f"r-{state.value}"} - ({"r-succeeded"} if state is RunState.SUCCEEDED else set())
        assert expected <= indexed(deps, state)
    results = AuditOps(deps).verify_all()
    assert len(results) == len(RunState) + 3 and all(result.ok for result in results), results
    checked = StateOps(deps).check()
    assert checked.examined["runs"] == len(RunState) + 3 and not checked.differences, checked.differences


def test_a_run_that_changed_since_it_was_read_is_left_for_its_next_write(
    aws: boto3.session.Session,
    settings: Settings,
    clock: ManualClock,
    deps: Deps,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with monkeypatch.context() as earlier:
        earlier.setattr(codec, "in_state_index", lambda data: True)
        ended_run(deps, "r1", RunState.SUCCEEDED)
    ddb = aws.client("dynamodb")
    real_update = deps.store.client.update_item  # type: ignore[attr-defined]

    def raced(**kwargs: Any) -> Any:
        # an operator's action lands between the pass's read and its write
        ddb.update_item(
            TableName=settings.table("runs"),
            Key={"run_id": {"S": "r1"}},
            UpdateExpression="SET rev = rev + :one",
            ExpressionAttributeValues={":one": {"N": "1"}},
        )
        return real_update(**kwargs)

    monkeypatch.setattr(deps.store.client, "update_item", raced)  # type: ignore[attr-defined]
    report = migrate_state_index(deps)
    assert (report.changed, report.skipped) == (0, 1)
    assert raw_runs(aws, settings)["r1"]["state"] == {"S": "succeeded"}  # still in the index
