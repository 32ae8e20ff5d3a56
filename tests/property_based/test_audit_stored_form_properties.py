"""``audit verify --all`` checks records as stored (``verify_fields``) rather than as models
(``verify_chain``). On random evidence, stored in DynamoDB's item form and read back as the bulk
pass reads it: an intact chain verifies both ways with the same words, and after any one change
to a stored record the bulk pass never passes what the model check fails. The item decoding it
uses without ``TypeDeserializer`` gives the deserializer's values. A store writes the fields a
record was hashed over (``next_fields``), the same item its model's dump would make."""

from __future__ import annotations

import hashlib
import hmac
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from boto3.dynamodb.types import TypeDeserializer
from hypothesis import given, settings
from hypothesis import strategies as st

from rebound.adapters.dynamo.codec import _plain, from_item, to_item
from rebound.domain.audit import GENESIS, AuditFields, audit_record, next_fields, verify_chain, verify_fields
from rebound.domain.audit_record import AuditRecord

pytestmark = pytest.mark.property_based
T0 = datetime(2026, 3, 7, 9, tzinfo=UTC)
SECRET = b"property-key"
KEY_ID = "local:property"


def sign(label: str, message: bytes) -> str:
    key = hmac.new(SECRET, label.encode(), hashlib.sha256).digest()
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def check(key_id: str, label: str, message: bytes, mac: str) -> bool:
    return key_id == KEY_ID and hmac.compare_digest(sign(label, message), mac)


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**12), max_value=10**12),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
    st.sampled_from([60.0, 0.5, -3.0, 1e3]),
    st.text(max_size=8),
)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(min_size=1, max_size=5), inner, max_size=3)
    ),
    max_leaves=12,
)
evidence = st.dictionaries(st.text(min_size=1, max_size=6), json_values, max_size=4)


def stored(records: list[AuditRecord]) -> list[AuditFields]:
    """The records as the bulk pass reads them: through the DynamoDB item a store writes (the
    fields each was hashed over, ``next_fields``) and back."""
    return [from_item(to_item(STAGED[r.hash], "audit"), plain=True) for r in records]


STAGED: dict[str, AuditFields] = {}
"""Each record's fields as ``next_fields`` made them, by hash."""


def make_chain(evidences: list[dict[str, Any]]) -> list[AuditRecord]:
    records: list[AuditRecord] = []
    seq, head = 0, GENESIS
    for n, ev in enumerate(evidences):
        fields = next_fields(
            subject="msg#m",
            prev_seq=seq,
            prev_hash=head,
            at=T0 + timedelta(hours=n * 7),
            actor="executor",
            action=f"step-{n}",
            to_state="pending" if n % 2 else None,
            evidence=ev,
            key_id=KEY_ID,
            sign=sign,
        )
        record = AuditRecord.model_validate(fields)
        STAGED[record.hash] = fields
        records.append(record)
        seq, head = record.seq, record.hash
    return records


@settings(max_examples=150, deadline=None)
@given(evidence, st.booleans(), st.integers(min_value=0, max_value=10**6))
def test_a_record_built_from_its_fields_is_the_record_validating_them_builds(
    ev: dict[str, Any], keyed: bool, micros: int
) -> None:
    fields = next_fields(
        subject="run#r",
        prev_seq=3,
        prev_hash=GENESIS,
        at=T0 + timedelta(microseconds=micros),  # the record keeps milliseconds, as its text does
        actor="executor",
        action="claimed",
        from_state="pending",
        to_state=None,
        evidence=ev,
        key_id=KEY_ID if keyed else None,
        sign=sign if keyed else None,
    )
    built, validated = audit_record(fields), AuditRecord.model_validate(fields)
    assert built == validated
    assert built.model_dump() == validated.model_dump()
    assert built.model_dump(mode="json") == validated.model_dump(mode="json")
    assert built.model_fields_set == validated.model_fields_set
    assert built.evidence is not ev  # the record's own copy, as validating makes


@settings(max_examples=150, deadline=None)
@given(st.lists(evidence, min_size=1, max_size=4))
def test_a_store_writes_the_item_the_records_dump_would_have_made(evidences: list[dict[str, Any]]) -> None:
    for record in make_chain(evidences):
        assert to_item(STAGED[record.hash], "audit") == to_item(record.model_dump(mode="json"), "audit")


@settings(max_examples=150, deadline=None)
@given(st.lists(evidence, min_size=1, max_size=4))
def test_an_intact_chain_verifies_as_stored_with_the_model_checks_words(
    evidences: list[dict[str, Any]],
) -> None:
    records = make_chain(evidences)
    fast, slow = verify_fields("msg#m", stored(records), check), verify_chain("msg#m", records, check)
    assert fast.ok and (fast.ok, fast.detail, fast.records) == (slow.ok, slow.detail, slow.records)


MUTATIONS = (
    "evidence-value",
    "evidence-key",
    "actor",
    "drop-field",
    "add-field",
    "seq",
    "float-form",
    "mac-key",
)


def mutate(fields: AuditFields, how: str, value: Any) -> AuditFields:
    changed = dict(fields)
    if how == "evidence-value":
        changed["evidence"] = {**changed["evidence"], "k": value}
    elif how == "evidence-key":
        changed["evidence"] = {f"{k}x": v for k, v in changed["evidence"].items()} or {"x": value}
    elif how == "actor":
        changed["actor"] = f"{changed['actor']}!"
    elif how == "drop-field":
        changed.pop("action")
    elif how == "add-field":
        changed["note"] = value
    elif how == "seq":
        changed["seq"] = changed["seq"] + 1
    elif how == "float-form":
        changed["evidence"] = {**changed["evidence"], "n": 60.0}
    else:
        changed["mac_key"] = "local:other"
    return changed


@settings(max_examples=200, deadline=None)
@given(
    st.lists(evidence, min_size=1, max_size=3),
    st.data(),
    st.sampled_from(MUTATIONS),
    json_values,
)
def test_after_any_change_to_a_stored_record_the_bulk_pass_is_never_looser(
    evidences: list[dict[str, Any]], data: st.DataObject, how: str, value: Any
) -> None:
    records = make_chain(evidences)
    fields = stored(records)
    index = data.draw(st.integers(min_value=0, max_value=len(fields) - 1))
    fields[index] = mutate(fields[index], how, value)
    fast = verify_fields("msg#m", fields, check)
    try:
        models = [AuditRecord.model_validate(f) for f in fields]
    except ValueError:  # the model check cannot even read it: the bulk pass must fail it too
        assert not fast.ok
        return
    slow = verify_chain("msg#m", models, check)
    assert not (fast.ok and not slow.ok), (how, fast, slow)


attribute_values = st.recursive(
    st.one_of(
        st.builds(lambda s: {"S": s}, st.text(max_size=6)),
        st.builds(
            lambda n: {"N": n},
            st.sampled_from(["0", "1", "-7", "1.5", "60.0", "1e3", "-0.25", "12345678901234"]),
        ),
        st.builds(lambda b: {"BOOL": b}, st.booleans()),
        st.just({"NULL": True}),
        st.builds(lambda b: {"B": b}, st.binary(max_size=6)),
        st.builds(lambda ss: {"SS": sorted(set(ss))}, st.lists(st.text(max_size=3), min_size=1, max_size=3)),
    ),
    lambda inner: (
        st.builds(lambda v: {"L": v}, st.lists(inner, max_size=3))
        | st.builds(lambda m: {"M": m}, st.dictionaries(st.text(min_size=1, max_size=4), inner, max_size=3))
    ),
    max_leaves=10,
)


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(
        # doc holds the record; ttl is storage (when DynamoDB may delete it), left out of it
        st.text(min_size=1, max_size=5).filter(lambda k: k not in ("doc", "ttl")),
        attribute_values,
        max_size=5,
    )
)
def test_items_decode_as_the_type_deserializer_gives_them(item: dict[str, Any]) -> None:
    expected = {key: _plain(TypeDeserializer().deserialize(value)) for key, value in item.items()}
    assert from_item(item) == expected
