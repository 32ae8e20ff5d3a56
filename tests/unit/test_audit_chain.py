"""The audit chain shows tampering, and a run can be rebuilt from its trail."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from rebound.domain.audit import GENESIS, next_record, rebuild_run, run_changes, verify_chain
from rebound.domain.models import AuditRecord, Run, RunState, Trigger

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
            at=T0,
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
