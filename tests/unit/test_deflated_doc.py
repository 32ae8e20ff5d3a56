"""A record's ``doc`` is stored deflated when that is smaller (``rebound.adapters.dynamo.codec``):
every run and audit record then fits the write unit it is billed by, and items written as text
before read as they always did."""

from __future__ import annotations

import zlib
from datetime import UTC, datetime
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from rebound.adapters.dynamo.codec import DEFLATE_FROM, from_item, pack_doc, to_item
from rebound.domain.audit import next_fields
from rebound.domain.jsonutil import dumps
from rebound_local.bill_units import item_size, write_units

KEY_ARN = "arn:aws:kms:us-east-1:123456789012:key/0f6c2a55-6b1e-4a7c-9d0e-5b2f7a9c1d34"
"""A key ARN of the length AWS gives (75 characters), as audit records name the key on AWS."""

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**12), 10**12) | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=30,
)


@given(st.dictionaries(st.text(min_size=1, max_size=12), json_values, max_size=12))
def test_a_run_reads_back_as_written_whether_or_not_its_doc_was_deflated(doc: dict[str, Any]) -> None:
    record = {"run_id": "acme.invoice-export-001:20260307T090000Z", "state": "running", **doc}
    record = {k: v for k, v in record.items() if k != "doc"}
    expected = {k: v for k, v in record.items() if v is not None}
    assert from_item(to_item(record, "runs")) == expected


def test_a_document_written_as_text_before_reads_as_it_did() -> None:
    item = {
        "run_id": {"S": "r1"},
        "state": {"S": "running"},
        "doc": {"S": '{"attempt": 2, "tenant": "acme"}'},
    }
    assert from_item(item) == {"run_id": "r1", "state": "running", "attempt": 2, "tenant": "acme"}


def test_a_short_document_stays_text_and_a_long_one_is_stored_smaller() -> None:
    assert pack_doc('{"attempt": 1}') == '{"attempt": 1}'
    long = dumps({"changes": {f"field_{n}": "2026-03-07T09:00:00.000Z" for n in range(20)}})
    packed = pack_doc(long)
    assert len(long) >= DEFLATE_FROM and isinstance(packed, bytes) and len(packed) < len(long) // 2
    assert to_item({"run_id": "r1", "doc_field": long}, "runs")["doc"] == {
        "B": pack_doc(dumps({"doc_field": long}))
    }


def full_window(raw: bytes) -> bytes:
    """What deflating with zlib's whole 32 KB window and its default memory gives."""
    packer = zlib.compressobj(6, zlib.DEFLATED, -15)
    return packer.compress(raw) + packer.flush()


@given(
    st.lists(
        st.sampled_from(["run#", "acme.", "2026-03-07T09:", "attempt", '"n": ', "ab", "\u00e9"]),
        max_size=3000,
    )
)
def test_a_document_inflates_back_and_is_no_larger_than_with_the_whole_window(parts: list[str]) -> None:
    """The window is sized to the document (the compressor's state is a tenth as large): what it
    stores reads back with the same inflater, and is never larger than the whole window makes."""
    text = dumps({"parts": parts})
    packed = pack_doc(text)
    raw = text.encode()
    if isinstance(packed, str):  # short, or no smaller deflated
        assert packed == text
        assert len(raw) < DEFLATE_FROM or len(full_window(raw)) >= len(raw)
        return
    assert from_item({"run_id": {"S": "r1"}, "doc": {"B": packed}}) == {"run_id": "r1", "parts": parts}
    assert len(packed) <= len(full_window(raw))


def claim_record(task_key: str) -> dict[str, Any]:
    """The audit record of a claim, on AWS: the whole new run in its changes, keyed by a KMS ARN."""
    at = datetime(2026, 3, 7, 9, 0, tzinfo=UTC)
    run_id = f"{task_key}:20260307T090000Z"
    changes = {
        "task_id": task_key,
        "tenant": task_key.split(".")[0],
        "trigger": "schedule",
        "scheduled_for": "2026-03-07T09:00:00.000Z",
        "created_at": "2026-03-07T09:00:00.000Z",
        "state": "running",
        "attempt": 1,
        "attempts": [{"n": 1, "started_at": "2026-03-07T09:00:00.000Z"}],
        "lease_expires_at": "2026-03-07T09:01:00.000Z",
        "lease_owner": "ca422979-4d39-410d-a332-17dd730fec1c",
    }
    return next_fields(
        subject=f"run#{run_id}",
        prev_seq=0,
        prev_hash="0" * 64,
        at=at,
        actor="executor",
        action="attempt-started",
        from_state="pending",
        to_state="running",
        evidence={
            "attempt": 1,
            "created": True,
            "deadline_s": 30.0,
            "delivery": {"message_id": "61cf997f-ef02-4948-b4bb-9f6d57ae356c", "receive_count": 1},
            "changes": changes,
        },
        key_id=KEY_ARN,
        sign=lambda label, message: "9ecaaa09c6554fa64188815a13d825aa06674599105bab9bb2bb962f22824c62",
    )


def test_a_claims_audit_record_with_aws_sized_names_is_one_write_unit() -> None:
    record = claim_record("acme.invoice-export-nightly-0001")  # a task key of 32 characters
    as_text = {"subject": {"S": record["subject"]}, "seq": {"N": "1"}, "doc": {"S": dumps(record)}}
    assert write_units(item_size(as_text)) == 2, "as text it would be two units (the old form)"
    assert write_units(item_size(to_item(record, "audit"))) == 1
