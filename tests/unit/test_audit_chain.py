"""The audit chain shows tampering, and a run can be rebuilt from its trail."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from rebound.domain.audit import GENESIS, next_record, rebuild_run, run_changes, verify_chain
from rebound.domain.audit_record import AuditRecord
from rebound.domain.run import Attempt, Run, RunState, Trigger
from rebound.domain.timefmt import iso

pytestmark = pytest.mark.unit
T0 = datetime(2026, 3, 7, 9, tzinfo=UTC)


def chain(n: int) -> list[AuditRecord]:
    records: list[AuditRecord] = []
    seq, head = 0, GENESIS
    for i in range(n):
        rec = next_record(
            subject="run#r",
            prev_seq=seq,
            prev_hash=head,
            at=T0 + timedelta(seconds=i),
            actor="executor",
            action=f"step-{i}",
            evidence={"i": i, "delay_s": 60.0},
        )
        records.append(rec)
        seq, head = rec.seq, rec.hash
    return records


def test_an_untouched_chain_verifies() -> None:
    assert verify_chain("run#r", chain(5)).ok


def test_an_edited_record_breaks_the_chain() -> None:
    records = chain(5)
    records[2] = records[2].model_copy(update={"evidence": {"i": 99}})
    check = verify_chain("run#r", records)
    assert not check.ok and "seq 3 was altered" in check.detail


def test_a_removed_record_breaks_the_chain() -> None:
    records = chain(5)
    del records[1]
    assert "missing" in verify_chain("run#r", records).detail


def test_a_forged_record_with_recomputed_hash_does_not_link() -> None:
    records = chain(3)
    forged = next_record(subject="run#r", prev_seq=1, prev_hash=GENESIS, at=T0, actor="mallory", action="x")
    records[1] = forged
    check = verify_chain("run#r", records)
    assert not check.ok and "does not link" in check.detail


def test_integral_floats_hash_like_the_integers_dynamodb_gives_back() -> None:
    records = chain(2)
    roundtrip = [r.model_copy(update={"evidence": {**r.evidence, "delay_s": 60}}) for r in records]
    assert verify_chain("run#r", roundtrip).ok


def test_rebuilding_from_changes_reproduces_the_run() -> None:
    created = Run(
        run_id="r",
        task_id="t",
        tenant="acme",
        trigger=Trigger.SCHEDULE,
        scheduled_for=T0,
        created_at=T0,
        updated_at=T0,
    )
    running = created.model_copy(
        update={"state": RunState.RUNNING, "attempt": 1, "updated_at": T0 + timedelta(1)}
    )
    done = running.model_copy(update={"state": RunState.SUCCEEDED, "updated_at": T0 + timedelta(2)})
    records, seq, head, before = [], 0, GENESIS, None
    for after in (created, running, done):
        rec = next_record(
            subject="run#r",
            prev_seq=seq,
            prev_hash=head,
            at=after.updated_at,  # a run is saved with its record's time (StagingUnitOfWork.save_run)
            actor="x",
            action="a",
            evidence={"changes": run_changes(before, after)},
        )
        records.append(rec)
        seq, head, before = rec.seq, rec.hash, after
    rebuilt = rebuild_run("r", records)
    assert rebuilt.model_dump(exclude={"audit_seq", "audit_head"}) == done.model_dump(
        exclude={"audit_seq", "audit_head"}
    )
    assert rebuilt.audit_seq == 3 and rebuilt.audit_head == records[-1].hash


def test_a_new_runs_record_says_only_what_differs_from_the_defaults_and_still_rebuilds_it() -> None:
    run = Run(
        run_id="r",
        task_id="t",
        tenant="acme",
        trigger=Trigger.SCHEDULE,
        scheduled_for=T0,
        created_at=T0,
        updated_at=T0,
        budget_started_at=T0,
        attempt=1,
        state=RunState.RUNNING,
        attempts=[Attempt(n=1, started_at=T0)],
    )
    changes = run_changes(None, run)
    # Defaults, the record's own time and a budget that starts at creation are not repeated.
    assert not {"updated_at", "budget_started_at", "dispatch", "slots", "sla_breaches"} & set(changes)
    assert changes["attempts"] == [{"n": 1, "started_at": iso(T0)}]
    record = next_record(
        subject="run#r",
        prev_seq=0,
        prev_hash=GENESIS,
        at=T0,
        actor="x",
        action="a",
        evidence={"changes": changes},
    )
    assert rebuild_run("r", [record]).model_dump(exclude={"audit_seq", "audit_head"}) == run.model_dump(
        exclude={"audit_seq", "audit_head"}
    )
    # A new run without a budget start says so, so that rebuilding does not take its creation time.
    unbudgeted = run.model_copy(update={"budget_started_at": None})
    assert run_changes(None, unbudgeted)["budget_started_at"] is None
    record = next_record(
        subject="run#r",
        prev_seq=0,
        prev_hash=GENESIS,
        at=T0,
        actor="x",
        action="a",
        evidence={"changes": run_changes(None, unbudgeted)},
    )
    assert rebuild_run("r", [record]).budget_started_at is None


def test_a_poll_field_still_at_its_default_is_not_carried_and_a_touched_one_is() -> None:
    before = Run(
        run_id="r",
        task_id="t",
        tenant="acme",
        trigger=Trigger.SCHEDULE,
        scheduled_for=T0,
        created_at=T0,
        updated_at=T0,
        state=RunState.PENDING,
    )
    polled = before.model_copy(update={"dispatch": 2, "wait_polls": 2})  # what polls leave, unrecorded
    running = polled.model_copy(update={"state": RunState.RUNNING, "attempt": 1})
    changes = run_changes(polled, running)
    assert changes["dispatch"] == 2 and changes["wait_polls"] == 2  # the chain catches up
    assert "heartbeats" not in changes and "next_retry_at" not in changes  # at their defaults
