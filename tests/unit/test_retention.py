"""What expires, when (``rebound.domain.retention``), and how the archive names and reads a batch."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest
from pydantic import ValidationError

from rebound.adapters.audit_archive import decode, encode, inserted, object_key
from rebound.adapters.dynamo.codec import from_item, to_item
from rebound.domain.ids import fire_time, scheduled_day, scheduled_run_id
from rebound.domain.retention import (
    FINISHED,
    Retention,
    audit_expiry,
    expired,
    records_may_have_expired,
    run_expiry,
)
from rebound.resources import RECORD_TTL

AT = datetime(2026, 3, 7, 9, 0, tzinfo=UTC)


def test_only_finished_runs_and_runs_records_expire() -> None:
    days = Retention(runs_days=10, audit_days=30)
    assert run_expiry(days, True, AT) == int(datetime(2026, 3, 17, 9, 0, tzinfo=UTC).timestamp())
    assert run_expiry(days, False, AT) is None  # dead-lettered, waiting, running: kept
    assert audit_expiry(days, "run#acme.export:20260307T090000Z", AT) == int(
        datetime(2026, 4, 6, 9, 0, tzinfo=UTC).timestamp()
    )
    for subject in ("task#acme.export", "workorder#wo-1", "policy#critical", "tenant#acme"):
        assert audit_expiry(days, subject, AT) is None
    assert run_expiry(None, True, AT) is None and audit_expiry(None, "run#x", AT) is None
    assert {"succeeded", "skipped", "cancelled", "superseded"} == FINISHED


def test_records_must_outlive_the_runs_they_are_checked_against() -> None:
    with pytest.raises(ValidationError, match=r"audit_days \(10\) must be at least runs_days \(30\)"):
        Retention(runs_days=30, audit_days=10)
    with pytest.raises(ValidationError, match="runs_days"):
        Retention(runs_days=0)
    assert Retention() == Retention(runs_days=90, audit_days=400)


def test_the_ttl_is_storage_never_part_of_a_record_read_back() -> None:
    item = to_item({"subject": "run#x", "seq": 1, "hash": "h", RECORD_TTL: 1_900_000_000}, "audit")
    assert item[RECORD_TTL] == {"N": "1900000000"}
    assert from_item(item) == {"subject": "run#x", "seq": 1, "hash": "h"}


def test_a_scheduled_runs_archive_is_read_from_the_day_before_it_fired() -> None:
    assert scheduled_day(scheduled_run_id("acme.export", AT)) == date(2026, 3, 6)
    assert scheduled_day("acme.export:manual-t0123456789abcdef") is None
    assert scheduled_day("acme.export:evt-order-17") is None


def test_a_batch_is_one_object_named_by_its_day_and_sequence_numbers() -> None:
    assert (
        object_key("2026-03-07T09:00:12.345Z", "100", "199") == "audit/v1/2026/03/07/090012-100-199.jsonl.gz"
    )
    records = [{"subject": "run#x", "seq": n, "evidence": {"attempt": n}} for n in (1, 2)]
    assert decode(encode(records)) == records
    assert encode(records) == encode(records)  # the same batch again writes the same bytes
    stream = [
        {
            "eventName": "INSERT",
            "dynamodb": {"NewImage": to_item(records[0], "audit"), "SequenceNumber": "1"},
        },
        {
            "eventName": "REMOVE",
            "dynamodb": {"OldImage": to_item(records[1], "audit"), "SequenceNumber": "2"},
        },
    ]
    assert inserted(stream) == [records[0]]  # TTL's deletions are not records


def test_what_is_missing_counts_as_expired_only_once_its_time_has_passed() -> None:
    days = Retention(runs_days=10, audit_days=30)
    assert fire_time(scheduled_run_id("acme.export", AT)) == AT
    assert not expired(days, "succeeded", AT, AT + timedelta(days=9))  # deleted, not expired
    assert expired(days, "succeeded", AT, AT + timedelta(days=10))
    assert not expired(days, "dead_lettered", AT, AT + timedelta(days=400))  # never expires
    assert not expired(None, "succeeded", AT, AT + timedelta(days=400))
    assert not records_may_have_expired(days, AT, AT + timedelta(days=29))
    assert records_may_have_expired(days, AT, AT + timedelta(days=30))
    assert records_may_have_expired(days, None, AT)  # no fire time to tell by
    assert not records_may_have_expired(None, None, AT)
