"""``audit_records_archived``: the hostile simulations' judge of the audit archive."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from rebound_local.invariants import archived_as_written

DUE = datetime(2026, 3, 7, 10, 0, tzinfo=UTC)


def record(subject: str, seq: int, at: str, digest: str | None = None) -> dict[str, Any]:
    return {"subject": subject, "seq": seq, "at": at, "hash": digest or f"{subject}-{seq}"}


CHAINS = {
    "run#a": [record("run#a", 1, "2026-03-07T09:00:00Z"), record("run#a", 2, "2026-03-07T09:01:00Z")],
    "run#b": [record("run#b", 1, "2026-03-07T09:58:00Z")],
    "task#t": [record("task#t", 1, "2026-03-07T08:00:00Z")],
}


def test_holds_when_every_record_written_before_the_due_time_is_archived_as_written() -> None:
    archived = {"run#a": CHAINS["run#a"], "task#t": CHAINS["task#t"]}  # run#b is still in its batch
    verdict = archived_as_written(CHAINS, archived, datetime(2026, 3, 7, 9, 30, tzinfo=UTC))
    assert verdict.ok and verdict.counts == {"due": 3, "archived": 3}


def test_a_record_due_and_not_archived_fails() -> None:
    archived = {"run#a": CHAINS["run#a"][:1], "task#t": CHAINS["task#t"]}
    verdict = archived_as_written(CHAINS, archived, DUE)
    assert not verdict.ok
    assert verdict.examples == [
        "run#a #2 (written 2026-03-07T09:01:00Z)",
        "run#b #1 (written 2026-03-07T09:58:00Z)",
    ]


def test_a_record_changed_in_the_table_after_it_was_archived_fails() -> None:
    edited = {**record("run#a", 2, "2026-03-07T09:01:00Z"), "actor": "someone-else"}  # its hash kept
    tampered = {**CHAINS, "run#a": [CHAINS["run#a"][0], edited]}
    verdict = archived_as_written(tampered, CHAINS, DUE)
    assert not verdict.ok and verdict.examples == ["run#a #2: the table's record is not the one archived"]


def test_a_record_only_in_the_archive_fails() -> None:
    archived = {**CHAINS, "run#c": [record("run#c", 1, "2026-03-07T09:00:00Z")]}
    verdict = archived_as_written(CHAINS, archived, DUE)
    assert not verdict.ok and verdict.examples == ["run#c #1: archived, not in the table"]
