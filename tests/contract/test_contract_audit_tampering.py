"""``rebound audit verify`` catches each way of rewriting the trail by someone who can write the
audit table but not use the audit key: an edited record, a deleted record, a record inserted with
a recomputed (unkeyed) hash, a record moved between chains; one subject at a time and in the bulk
pass of ``--all`` (``verify``, below). Both stores: the DynamoDB store keys
its records with the local cloud's KMS HMAC key, the memory store with its local key.

The tampering writes the table directly (``put_raw``/``delete_raw``), as an attacker with
``PutItem``/``DeleteItem`` would; the IAM deny on the audit table (``tests/infra``) is what keeps
Rebound's own roles from doing it on AWS.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from contract_support import at, create, new_run, running

from rebound.adapters.dynamo import DynamoStore, from_item
from rebound.adapters.dynamo.codec import to_item
from rebound.adapters.memory import MemoryStore
from rebound.domain.audit import record_hash
from rebound.domain.audit_record import AuditRecord
from rebound.domain.run import RunState
from rebound.engine.ports import Store
from rebound.ops.audit import AuditOps, AuditResult
from rebound.ops.audit import _judge_stored as judge_stored


def rehash(item: dict[str, Any]) -> str:
    """The unkeyed hash anyone can recompute (over the record as read, absent fields as null)."""
    return record_hash(AuditRecord.model_validate(item).model_dump(mode="json"))


def verify(store: Store, subject: str) -> AuditResult:
    """The verdict of ``audit verify SUBJECT``, after checking that ``audit verify --all`` reaches
    it too, and that its bulk pass over the records as stored reaches it alone (a tampered chain
    that pass let through would never be verified again)."""
    ops = AuditOps(SimpleNamespace(store=store, settings=SimpleNamespace(retention=None)))  # type: ignore[arg-type]
    single = ops.verify(subject)
    trails = {s: t for part in store.audit_segment_parts(0, 1) for s, t in part.items()}
    runs = {r: run for part in store.runs_segment_parts(0, 1) for r, run in part.items()}
    bulk = judge_stored(single.subject, trails[single.subject], runs, store.audit_keys.check)
    assert (bulk.ok, bulk.detail) == (single.ok, single.detail)
    assert {r.subject: r for r in ops.verify_all(segments=3)}[single.subject] == single
    return single


def raw(store: Store, subject: str, seq: int) -> dict[str, Any]:
    if isinstance(store, MemoryStore):
        return dict(store._tables["audit"][(subject, seq)])
    assert isinstance(store, DynamoStore)
    key = {"subject": {"S": subject}, "seq": {"N": str(seq)}}
    return from_item(store.client.get_item(TableName=store.tables["audit"], Key=key)["Item"])


def put_raw(store: Store, item: dict[str, Any]) -> None:
    if isinstance(store, MemoryStore):
        store._tables["audit"][(item["subject"], item["seq"])] = {
            k: v for k, v in item.items() if v is not None
        }
        return
    assert isinstance(store, DynamoStore)
    store.client.put_item(TableName=store.tables["audit"], Item=to_item(item, "audit"))


def delete_raw(store: Store, subject: str, seq: int) -> None:
    if isinstance(store, MemoryStore):
        del store._tables["audit"][(subject, seq)]
        return
    assert isinstance(store, DynamoStore)
    key = {"subject": {"S": subject}, "seq": {"N": str(seq)}}
    store.client.delete_item(TableName=store.tables["audit"], Key=key)


def three_records(store: Store, run_id: str = "r1") -> None:
    """A run with a keyed chain of three records: created, claimed, failed."""
    run = create(store, new_run(run_id))
    uow = store.unit_of_work("executor", at(1))
    run = uow.save_run(run, running(run, at(1)), action="claim")
    uow.commit()
    uow = store.unit_of_work("executor", at(2))
    uow.save_run(run, run.model_copy(update={"state": RunState.FAILED}), action="failed")
    uow.commit()


def test_an_untouched_keyed_chain_verifies_and_says_it_is_keyed(store: Store) -> None:
    three_records(store)
    result = verify(store, "r1")
    assert result.ok and result.keying == "keyed" and result.unkeyed == 0
    assert raw(store, "run#r1", 1)["mac_key"] == store.audit_keys.key_id


def test_an_edited_record_is_caught_even_with_its_hash_recomputed(store: Store) -> None:
    three_records(store)
    edited = raw(store, "run#r1", 3)
    edited["actor"] = "someone-else"
    edited["hash"] = rehash(edited)  # the unkeyed hash fixed up; the MAC cannot be
    put_raw(store, edited)
    # the hash was recomputed, so the link to the next record (there is none) and the hash hold:
    result = verify(store, "r1")
    assert not result.ok and "MAC that does not verify" in result.detail


def test_a_deleted_record_is_caught(store: Store) -> None:
    three_records(store)
    delete_raw(store, "run#r1", 2)
    result = verify(store, "r1")
    assert not result.ok and "record 2 is missing" in result.detail


def test_a_record_inserted_with_a_recomputed_unkeyed_hash_is_caught(store: Store) -> None:
    three_records(store)
    last = raw(store, "run#r1", 3)
    inserted = {
        **last,
        "seq": 4,
        "actor": "mallory",
        "action": "cancelled",
        "prev_hash": last["hash"],
        "mac_alg": None,
        "mac_key": None,
        "mac": None,
    }
    inserted["hash"] = rehash(inserted)
    put_raw(store, inserted)
    result = verify(store, "r1")
    assert not result.ok and "seq 4 is unkeyed after keyed records" in result.detail


def test_a_record_moved_between_chains_is_caught(store: Store) -> None:
    three_records(store, "r1")
    three_records(store, "r2")
    # r1's claim record replaces r2's: made to fit r2's chain by subject, link and hash
    moved = raw(store, "run#r1", 2)
    moved["subject"] = "run#r2"
    moved["prev_hash"] = raw(store, "run#r2", 1)["hash"]
    moved["hash"] = rehash(moved)
    put_raw(store, moved)
    following = raw(store, "run#r2", 3)
    following["prev_hash"] = moved["hash"]
    following["hash"] = rehash(following)
    put_raw(store, following)
    result = verify(store, "r2")
    assert not result.ok and "seq 2 has a MAC that does not verify" in result.detail


def test_a_record_with_fractional_and_integral_float_evidence_verifies_in_both_passes(store: Store) -> None:
    """The hash is over canonical JSON, where ``60.0`` is ``60``; the bulk pass hashes the record
    as read in one serialization, so it must read it with the same numbers."""
    uow = store.unit_of_work("executor", at(1))
    uow.append_audit("msg#m1", action="waited", evidence={"delay_s": 60.0, "share": 0.25, "n": [1.0, 2.5]})
    uow.commit()
    assert verify(store, "msg#m1").ok


def test_older_unkeyed_records_verify_by_hash_and_are_reported(store: Store) -> None:
    """A chain written before the chain was keyed: every record without a MAC."""
    for n in range(3):
        uow = store.unit_of_work("executor", at(n))
        uow.append_audit("msg#m1", action="refused", evidence={"n": n})
        uow.commit()
    assert verify(store, "msg#m1").keying == "keyed"
    prev = "0" * 64
    for seq in (1, 2, 3):
        item = {**raw(store, "msg#m1", seq), "mac_alg": None, "mac_key": None, "mac": None, "prev_hash": prev}
        item["hash"] = rehash(item)
        put_raw(store, item)
        prev = item["hash"]
    result = verify(store, "msg#m1")
    assert result.ok and result.keying == "unkeyed" and result.unkeyed == 3, result
    assert "3 unkeyed, by hash only" in result.detail


@pytest.mark.parametrize("signature", [None, "2026-03-07:" + "0" * 64])
def test_a_key_this_deployment_does_not_trust_never_verifies(store: Store, signature: str | None) -> None:
    three_records(store)
    record = raw(store, "run#r1", 1)
    assert not store.audit_keys.check(
        "arn:aws:kms:us-east-1:000000000000:key/other", "x", b"m", record["mac"]
    )
    assert signature is None or not store.audit_keys.check(store.audit_keys.key_id, "x", b"m", signature)
