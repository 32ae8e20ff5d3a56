"""The audit trail: an append-only, keyed hash chain per subject, and rebuilding a run from it.

Each record's ``hash`` is the SHA-256 of the canonical JSON of every other field but ``mac``, and
each record names the previous record's hash, so editing, removing or reordering any record breaks
the chain from that point on. A hash alone can be recomputed by whoever can write the table, so
each record also carries a ``mac``: HMAC-SHA256 of its ``hash`` (so of every other field), with a
key derived for the record's day from a KMS HMAC key (``mac_label``; the derivation is the
``AuditKeys`` port's). Without the key a record cannot be added, edited or moved to another chain
(the subject and sequence number are under the MAC) so that it still verifies.

Records written before the chain was keyed have no ``mac``: they verify by hash alone and are
reported as unkeyed. An unkeyed record after a keyed one in the same chain is refused: it was
inserted by someone without the key.

Run records carry the fields the transition changed in ``evidence.changes``; applying them in
order rebuilds the stored run.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from rebound.domain.audit_record import AuditRecord
from rebound.domain.jsonutil import canonical_bytes, canonical_bytes_of_plain
from rebound.domain.run import Run
from rebound.domain.timefmt import iso, parse_utc

GENESIS = "0" * 64
CHAIN_FIELDS = ("run_id", "audit_seq", "audit_head", "rev")
"""Fields the chain itself, or the store's optimistic lock, keeps: never part of a record's changes."""
CLAIM_CHANGES_SHOWN = ("lease_expires_at", "lease_owner")
"""Fields of a claim's (``attempt-started``) changes a run's timeline shows beside its evidence."""
RECORD_TIME_FIELDS = ("updated_at",)
"""Fields every record of a run sets to its own ``at`` (a run is saved with ``updated_at`` at the
time of its record): the record's time says them, so its changes leave them out."""
POLL_FIELDS = ("dispatch", "next_retry_at", "wait_polls")
"""Fields a waiting run's polls change without an audit record (``UnitOfWork.touch_run``). Every
record carries them, so the chain catches up with the polls at the next record."""
HEARTBEAT_FIELDS = ("heartbeat_at", "heartbeats", "progress", "lease_expires_at")
"""Fields an asynchronous attempt's heartbeats change without an audit record (``touch_run``), like
the polls: every record carries them, so the chain catches up at the attempt's outcome."""


def bookkept(run: Run) -> bool:
    """Whether bookkeeping may write ``run`` without an audit record (``UnitOfWork.touch_run``): a
    waiting run's polls, an asynchronous attempt's heartbeats. Only the revision locks such a run
    against a writer that read it before; on any other run every write adds a record, and the
    record's seq is the whole lock (``rebound.adapters.dynamo.write_ahead``)."""
    return run.waiting_since is not None or run.async_token_id is not None


MAC_ALG = "hmac-sha256/day-key/v1"
"""HMAC-SHA256 over ``mac_message`` with the key derived for ``mac_label`` of the record's day."""
MAC_FIELDS = ("mac_alg", "mac_key")
"""Fields a keyed record adds; left out of an unkeyed record's hash, so older hashes still hold."""

Sign = Callable[[str, bytes], str]
"""``sign(label, message)``: the MAC of ``message`` with the key derived for ``label``."""
CheckMac = Callable[[str, str, bytes, str], bool]
"""``check(key_id, label, message, mac)``: whether ``mac`` is right, with a trusted key."""


def mac_label(at: str) -> str:
    """The derivation label of a record made at ``at`` (ISO): one key a day, so the KMS key is
    asked once a day per process, and a day's key cannot sign a record of another day."""
    return f"rebound-audit/v1/{at[:10]}"


UNVERIFIED_ACTOR = "unverified"
"""The audit actor of a queue message that names an actor without a signature that checks."""


def actor_label(day: str) -> str:
    """The derivation label of an actor signature made on ``day`` (``YYYY-MM-DD``)."""
    return f"rebound-actor/v1/{day}"


def actor_message(run_id: str, actor: str) -> bytes:
    """What an actor signature covers: the actor and the run it acts on."""
    return canonical_bytes({"actor": actor, "run_id": run_id})


def sign_actor(run_id: str, actor: str, at: datetime, sign: Sign) -> str:
    """``<day>:<mac>``: the ops layer's signature of the actor it puts in a queue message."""
    day = iso(at)[:10]
    return f"{day}:{sign(actor_label(day), actor_message(run_id, actor))}"


def verified_actor(
    run_id: str, actor: str | None, signature: str | None, key_id: str, check: CheckMac, default: str
) -> tuple[str, str | None]:
    """The audit actor for a message that names ``actor`` with ``signature``, and the actor it
    claimed when that is not believed: ``default`` (a fixed system actor) when it names none, the
    actor when the signature checks, otherwise ``UNVERIFIED_ACTOR``."""
    if actor is None:
        return default, None
    day, _, mac = (signature or "").partition(":")
    if mac and check(key_id, actor_label(day), actor_message(run_id, actor), mac):
        return actor, None
    return UNVERIFIED_ACTOR, actor


def record_hash(fields: dict[str, Any]) -> str:
    hashed = _hashed(fields)
    evidence = hashed.get("evidence")
    if evidence:
        hashed["evidence"] = _integral_as_int(evidence)
    return hashlib.sha256(canonical_bytes(hashed)).hexdigest()


def _integral_as_int(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` with each integral float among them (``deadline_s``: 60.0) as an int, as the
    canonical form writes it anyway: the record is then encoded once (``canonical_bytes``)."""
    for value in values.values():
        if value.__class__ is float and value.is_integer():
            return {k: int(v) if v.__class__ is float and v.is_integer() else v for k, v in values.items()}
    return values


def _hashed(fields: dict[str, Any]) -> dict[str, Any]:
    """The fields a record's hash covers: all but ``hash`` and ``mac``, and the MAC fields only if
    set (an unkeyed record's hash leaves them out), in one pass."""
    return {k: v for k, v in fields.items() if k not in _NOT_HASHED and not (v is None and k in MAC_FIELDS)}


_NOT_HASHED = frozenset({"hash", "mac"})


def _plain_record_hash(fields: AuditFields) -> str:
    """``record_hash`` of fields whose integral numbers are ints already (``plain_loads``)."""
    return hashlib.sha256(canonical_bytes_of_plain(_hashed(fields))).hexdigest()


def mac_message(fields: dict[str, Any]) -> bytes:
    """What a record's MAC is computed over: its ``hash``, which covers every field but ``mac``
    (subject, seq, prev_hash and the MAC fields included). MACing the hash rather than the record
    again keeps the hot path to one canonical serialization per record; a record that differs in
    any field has another hash (SHA-256), so it cannot carry another record's MAC."""
    return f"{MAC_ALG}|{fields['hash']}".encode()


def next_record(**keywords: Any) -> AuditRecord:
    """The record after ``(prev_seq, prev_hash)``, made of ``next_fields(**keywords)``; keyed with
    ``sign`` (under ``key_id``) if given."""
    return AuditRecord.model_validate(next_fields(**keywords))


def audit_record(fields: AuditFields) -> AuditRecord:
    """The model of fields ``next_fields`` made: built without validating them again (each is of
    its type by construction), as ``AuditRecord.model_validate`` would build it
    (``tests/property_based/test_audit_stored_form_properties.py``)."""
    return AuditRecord.model_construct(
        **{**fields, "at": parse_utc(fields["at"]), "evidence": dict(fields["evidence"])}
    )


def next_fields(
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
    key_id: str | None = None,
    sign: Sign | None = None,
) -> AuditFields:
    """``next_record``'s fields as they are hashed and stored: a store writes these rather than the
    model's dump, which says the same (``tests/property_based/test_audit_stored_form_properties.py``)."""
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
    if sign is None:
        fields["hash"] = record_hash(fields)
        return fields
    keyed = {"mac_alg": MAC_ALG, "mac_key": key_id}
    # In the model's order (the hash is over the sorted form), so the stored document is the dump's.
    fields["hash"] = record_hash({**fields, **keyed})
    fields.update(keyed)
    fields["mac"] = sign(mac_label(fields["at"]), mac_message(fields))
    return fields


AuditFields = dict[str, Any]
"""An audit record as stored: ``AuditRecord.model_dump(mode="json")``, where the optional fields
that are unset (``None``) may be left out. ``verify_fields`` checks records in this form without
building a model of each (``rebound audit verify --all``)."""

_UNSET: AuditFields = {"from_state": None, "to_state": None, "evidence": {}}
"""The fields an ``AuditRecord`` defaults, as its JSON form has them."""


@dataclass(frozen=True)
class ChainCheck:
    subject: str
    ok: bool
    records: int
    detail: str
    unkeyed: int = 0
    """Records without a MAC (written before the chain was keyed): they verify by hash alone."""
    macs_checked: bool = True


def _mac_problem(fields: AuditFields, check: CheckMac) -> str | None:
    seq, alg, key, mac = fields["seq"], fields.get("mac_alg"), fields.get("mac_key"), fields.get("mac")
    if alg != MAC_ALG or not key or not mac:
        return f"seq {seq} has an unknown MAC algorithm {alg!r}"
    if not check(key, mac_label(fields["at"]), mac_message(fields), mac):
        return f"seq {seq} has a MAC that does not verify (forged, altered or moved)"
    return None


def verify_chain(
    subject: str, records: list[AuditRecord], check_mac: CheckMac | None = None, *, from_seq: int = 1
) -> ChainCheck:
    """Check order, links, hashes and (with ``check_mac``) MACs of one subject's records.

    Without ``check_mac`` only the unkeyed parts are checked (``macs_checked`` is false). With
    ``from_seq`` > 1 the chain is checked from that record on, whose link to the one before it
    cannot be (records before it expired from the table: ``rebound.domain.retention``)."""
    dumped = [record.model_dump(mode="json") for record in records]
    return _verified(subject, dumped, check_mac, record_hash, from_seq)


def verify_fields(subject: str, records: list[AuditFields], check_mac: CheckMac | None = None) -> ChainCheck:
    """``verify_chain`` of records as stored (``AuditFields``), integral numbers as ints
    (``jsonutil.plain_loads``), hashed in one serialization. A record the hash was not made over
    exactly as it is here (a field added, dropped, retyped, a number written ``60.0``) fails as
    altered, so this never passes a chain that ``verify_chain`` of the same records as models
    would fail; a record too malformed to check (no ``seq``, ``hash``, ...) fails the chain."""
    return _verified(subject, records, check_mac, _plain_record_hash)


def _verified(
    subject: str,
    records: list[AuditFields],
    check_mac: CheckMac | None,
    hash_of: Callable[[AuditFields], str],
    from_seq: int = 1,
) -> ChainCheck:
    try:
        return _verify_fields(subject, records, check_mac, hash_of, from_seq)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        return ChainCheck(
            subject,
            False,
            len(records),
            f"a record is malformed ({type(exc).__name__}: {exc})",
            0,
            check_mac is not None,
        )


def _verify_fields(
    subject: str,
    records: list[AuditFields],
    check_mac: CheckMac | None,
    hash_of: Callable[[AuditFields], str],
    from_seq: int = 1,
) -> ChainCheck:
    ordered = sorted(records, key=lambda r: r["seq"])
    prev = GENESIS if from_seq == 1 or not ordered else ordered[0]["prev_hash"]
    unkeyed = 0
    keyed_seen = False
    count = len(records)

    def broken(detail: str) -> ChainCheck:
        return ChainCheck(subject, False, count, detail, unkeyed, check_mac is not None)

    for index, stored in enumerate(ordered, start=from_seq):
        fields = {**_UNSET, **stored}
        seq = fields["seq"]
        if seq != index or type(seq) is not int:
            return broken(f"record {index} is missing (found seq {seq})")
        if fields["prev_hash"] != prev:
            return broken(f"seq {seq} does not link to seq {index - 1}")
        if fields["hash"] != hash_of(fields):
            return broken(f"seq {seq} was altered (hash mismatch)")
        if fields.get("mac") is None and fields.get("mac_alg") is None:
            if keyed_seen:
                return broken(f"seq {seq} is unkeyed after keyed records (inserted without the key)")
            unkeyed += 1
        else:
            keyed_seen = True
            problem = _mac_problem(fields, check_mac) if check_mac is not None else None
            if problem:
                return broken(problem)
        prev = fields["hash"]
    detail = f"{count} records verified"
    if from_seq > 1:
        detail += f" from #{from_seq} (#1-#{from_seq - 1} expired from the table; --archive verifies them)"
    if unkeyed:
        detail += f" ({unkeyed} unkeyed, by hash only)"
    if check_mac is None and keyed_seen:
        detail += " (MACs not checked: no key)"
    return ChainCheck(subject, True, count, detail, unkeyed, check_mac is not None)


def run_changes(before: Run | None, after: Run) -> dict[str, Any]:
    """The fields of ``after`` that differ from ``before``, and always the poll fields (a poll may
    have changed them since the last record). For a new run, every field that is not at its
    default: ``rebuild_run`` starts from the defaults, and a record that stays under 1 KB costs
    one write unit instead of two."""
    left_out = {*CHAIN_FIELDS, *RECORD_TIME_FIELDS}
    if before is None:
        created = after.model_dump(mode="json", exclude=left_out, exclude_defaults=True)
        # A new run's budget starts when it is created: said once (``rebuild_run`` reads it so).
        if created.get("budget_started_at") == created.get("created_at"):
            del created["budget_started_at"]
        elif "budget_started_at" not in created:
            created["budget_started_at"] = None
        return _compact(created)
    new = after.model_dump(mode="json", exclude=left_out)
    old = before.model_dump(mode="json", exclude=left_out)
    # A poll or a heartbeat only ever moves its fields away from their defaults (a later token, a
    # later time, one more), so one still at its default was not touched since the last record,
    # which therefore says it already: only the others need carrying.
    defaults = _RUN_DEFAULTS
    carried = {k for k in (*POLL_FIELDS, *HEARTBEAT_FIELDS) if new.get(k) != defaults.get(k)}
    return _compact({key: value for key, value in new.items() if old.get(key) != value or key in carried})


_RUN_DEFAULTS: dict[str, Any] = {
    name: field.get_default(call_default_factory=True) for name, field in Run.model_fields.items()
}


def _compact(changes: dict[str, Any]) -> dict[str, Any]:
    """``changes`` with each attempt's unset (``None``) fields left out: ``Attempt`` defaults them."""
    if isinstance(changes.get("attempts"), list):
        changes["attempts"] = [
            {k: v for k, v in a.items() if v is not None} if isinstance(a, dict) else a
            for a in changes["attempts"]
        ]
    return changes


def rebuild_run(run_id: str, records: list[AuditRecord]) -> Run:
    """The run as its audit trail says it should be stored now.

    Exact but for ``rev`` (the store's write counter) and, while a wait episode goes on, the
    poll fields and ``updated_at`` of the polls since its first record."""
    return _rebuild(run_id, [(r.seq, r.at, r.evidence, r.hash) for r in records])


def rolled_forward(run_id: str, stored: Run | None, records: list[AuditRecord]) -> Run:
    """The stored run with the records of its chain after its head applied: what a write that
    committed its audit record (the commit point, ``rebound.adapters.dynamo.write_ahead``) but not
    yet its item leaves the item to become. Bookkeeping the records do not carry (a poll's, a
    heartbeat's, ``rev``) stays as stored; a run never stored is rebuilt from its whole chain."""
    if stored is None:
        return rebuild_run(run_id, records)
    ahead = [(r.seq, r.at, r.evidence, r.hash) for r in records if r.seq > stored.audit_seq]
    if not ahead:
        return stored
    return Run.model_validate(_rebuilt_fields(run_id, ahead, base=stored.model_dump(mode="json")))


def _rebuild(run_id: str, records: list[tuple[int, Any, dict[str, Any], str]]) -> Run:
    """``rebuild_run`` of ``(seq, at, evidence, hash)`` of each record."""
    return Run.model_validate(_rebuilt_fields(run_id, records))


def _rebuilt_fields(
    run_id: str, records: list[tuple[int, Any, dict[str, Any], str]], base: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The fields ``_rebuild`` builds its run of (from ``base`` when given, else from nothing)."""
    fields: dict[str, Any] = {**(base or {}), "run_id": run_id}
    ordered = sorted(records, key=lambda r: r[0])
    for seq, at, evidence, _ in ordered:
        changes = evidence.get("changes", {})
        fields.update(dict.fromkeys(RECORD_TIME_FIELDS, at))
        if seq == 1 and "budget_started_at" not in changes:  # see ``run_changes``
            fields["budget_started_at"] = changes.get("created_at")
        fields.update(changes)  # records written before carry updated_at and budget_started_at
    if ordered:
        fields["audit_seq"] = ordered[-1][0]
        fields["audit_head"] = ordered[-1][3]
    return fields


def trail_mismatches(stored: Run, records: list[AuditRecord]) -> list[str]:
    """Fields of the stored run that differ from what its trail rebuilds, bookkeeping aside:
    ``rev`` never counts, and while a wait episode goes on, neither do the poll fields and
    ``updated_at`` (polls change them without a record); nor, while an asynchronous attempt runs,
    the heartbeat fields."""
    rebuilt = rebuild_run(stored.run_id, records)
    return _mismatches(stored.model_dump(mode="json"), rebuilt.model_dump(mode="json"))


def stored_run_mismatches(stored: dict[str, Any], records: list[AuditFields]) -> list[str]:
    """``trail_mismatches`` of a run and its records as stored (the run's JSON form, unset fields
    possibly left out; ``AuditFields``), without a model of the stored run. Stricter, never
    looser: a stored value that a model would read as the rebuilt one but that is written
    differently is a mismatch here. The rebuilt run is taken in its JSON form without a model
    where ``run_form.json_form`` knows that form, with one (pydantic) otherwise."""
    from rebound.domain.run_form import json_form  # only the bulk verify: off every cold start

    fields = _rebuilt_fields(
        str(stored["run_id"]), [(r["seq"], r["at"], r.get("evidence") or {}, r["hash"]) for r in records]
    )
    rebuilt = json_form(fields)
    if rebuilt is None:
        rebuilt = Run.model_validate(fields).model_dump(mode="json")
    return _mismatches(stored, rebuilt)


def _mismatches(actual: dict[str, Any], rebuilt: dict[str, Any]) -> list[str]:
    ignored = {"rev"}
    if actual.get("waiting_since") is not None:
        ignored |= {*POLL_FIELDS, "updated_at"}
    if actual.get("async_token_id") is not None:
        ignored |= {*HEARTBEAT_FIELDS, "updated_at"}
    if _set_fields(rebuilt, ignored) == _set_fields(actual, ignored):
        return []  # every field agrees (the common case: one comparison of two dicts)
    return sorted(
        k for k in set(rebuilt) | set(actual) if k not in ignored and rebuilt.get(k) != actual.get(k)
    )


def _set_fields(fields: dict[str, Any], ignored: set[str]) -> dict[str, Any]:
    """The fields that are set (not None) and not ignored: two runs' are equal exactly when
    ``.get`` of every field not ignored is equal in both (an unset field reads as None)."""
    return {k: v for k, v in fields.items() if v is not None and k not in ignored}
