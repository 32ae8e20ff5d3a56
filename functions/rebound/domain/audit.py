"""The audit trail: an append-only hash chain per subject, and rebuilding a run from it.

Each record's ``hash`` is the SHA-256 of the canonical JSON of every other field, and each
record names the previous record's hash, so editing, removing or reordering any record breaks
the chain from that point on. Run records carry the fields the transition changed in
``evidence.changes``; applying them in order rebuilds the stored run.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from rebound.domain.jsonutil import canonical_bytes
from rebound.domain.models import AuditRecord, Run
from rebound.domain.timefmt import iso

GENESIS = "0" * 64
CHAIN_FIELDS = ("run_id", "audit_seq", "audit_head", "rev")
"""Fields the chain itself, or the store's optimistic lock, keeps: never part of a record's changes."""
POLL_FIELDS = ("dispatch", "next_retry_at", "wait_polls")
"""Fields a waiting run's polls change without an audit record (``UnitOfWork.touch_run``). Every
record carries them, so the chain catches up with the polls at the next record."""
HEARTBEAT_FIELDS = ("heartbeat_at", "heartbeats", "progress", "lease_expires_at")
"""Fields an asynchronous attempt's heartbeats change without an audit record (``touch_run``), like
the polls: every record carries them, so the chain catches up at the attempt's outcome."""


def record_hash(fields: dict[str, Any]) -> str:
    body = {key: value for key, value in fields.items() if key != "hash"}
    return hashlib.sha256(canonical_bytes(body)).hexdigest()


def next_record(
    *,
    subject: str,
    prev_seq: int,
    prev_hash: str,
    at: datetime,
    actor: str,
    action: str,
    from_state: str | None = None,
    to_state: str | None = None,
    evidence: dict[str, Any] | None = None,
) -> AuditRecord:
    fields: dict[str, Any] = {
        "subject": subject,
        "seq": prev_seq + 1,
        "at": iso(at),
        "actor": actor,
        "action": action,
        "from_state": from_state,
        "to_state": to_state,
        "evidence": evidence or {},
        "prev_hash": prev_hash,
    }
    return AuditRecord.model_validate({**fields, "hash": record_hash(fields)})


@dataclass(frozen=True)
class ChainCheck:
    subject: str
    ok: bool
    records: int
    detail: str


def verify_chain(subject: str, records: list[AuditRecord]) -> ChainCheck:
    """Check order, links and hashes of one subject's records."""
    prev = GENESIS
    for index, record in enumerate(sorted(records, key=lambda r: r.seq), start=1):
        if record.seq != index:
            return ChainCheck(
                subject, False, len(records), f"record {index} is missing (found seq {record.seq})"
            )
        if record.prev_hash != prev:
            return ChainCheck(
                subject, False, len(records), f"seq {record.seq} does not link to seq {index - 1}"
            )
        expected = record_hash(record.model_dump(mode="json"))
        if record.hash != expected:
            return ChainCheck(subject, False, len(records), f"seq {record.seq} was altered (hash mismatch)")
        prev = record.hash
    return ChainCheck(subject, True, len(records), f"{len(records)} records verified")


def run_changes(before: Run | None, after: Run) -> dict[str, Any]:
    """The fields of ``after`` that differ from ``before`` (all fields for a new run), and always
    the poll fields (a poll may have changed them since the last record)."""
    new = after.model_dump(mode="json", exclude=set(CHAIN_FIELDS))
    if before is None:
        return new
    old = before.model_dump(mode="json", exclude=set(CHAIN_FIELDS))
    carried = {*POLL_FIELDS, *HEARTBEAT_FIELDS}
    return {key: value for key, value in new.items() if old.get(key) != value or key in carried}


def rebuild_run(run_id: str, records: list[AuditRecord]) -> Run:
    """The run as its audit trail says it should be stored now.

    Exact but for ``rev`` (the store's write counter) and, while a wait episode goes on, the
    poll fields and ``updated_at`` of the polls since its first record."""
    fields: dict[str, Any] = {"run_id": run_id}
    ordered = sorted(records, key=lambda r: r.seq)
    for record in ordered:
        fields.update(record.evidence.get("changes", {}))
    if ordered:
        fields["audit_seq"] = ordered[-1].seq
        fields["audit_head"] = ordered[-1].hash
    return Run.model_validate(fields)


def trail_mismatches(stored: Run, records: list[AuditRecord]) -> list[str]:
    """Fields of the stored run that differ from what its trail rebuilds, bookkeeping aside:
    ``rev`` never counts, and while a wait episode goes on, neither do the poll fields and
    ``updated_at`` (polls change them without a record); nor, while an asynchronous attempt runs,
    the heartbeat fields."""
    rebuilt = rebuild_run(stored.run_id, records).model_dump(mode="json")
    actual = stored.model_dump(mode="json")
    ignored = {"rev"}
    if stored.waiting_since is not None:
        ignored |= {*POLL_FIELDS, "updated_at"}
    if stored.async_token_id is not None:
        ignored |= {*HEARTBEAT_FIELDS, "updated_at"}
    return sorted(
        k for k in set(rebuilt) | set(actual) if k not in ignored and rebuilt.get(k) != actual.get(k)
    )
