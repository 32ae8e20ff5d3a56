"""How Rebound's records become DynamoDB items and back.

An item keeps as top-level attributes only what DynamoDB itself reads (keys, index keys, the
attributes conditions and TTL use); everything else travels in one JSON document, ``doc``.

``doc`` is stored deflated (a binary attribute) when that is smaller, as it is for every run and
audit record: DynamoDB bills a write by the started kilobyte of the item, and a claim's audit
record (the whole new run in its changes, two hex digests, a MAC and the key's ARN) is just over
one kilobyte as text and about half of it deflated. Text documents (items written before, and
short ones) read as they always did.
"""

from __future__ import annotations

import base64
import zlib
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from boto3.dynamodb.types import Binary, TypeDeserializer, TypeSerializer

from rebound.adapters import dlq_items
from rebound.domain.jsonutil import dumps, loads, plain_loads
from rebound.domain.run import STATE_INDEX_KEYS, TASK_INDEX_KEYS, found_by_fire, in_state_index
from rebound.resources import RECORD_TTL as TTL

Item = dict[str, Any]

_SER = TypeSerializer()
_DESER = TypeDeserializer()


def _plain(value: Any) -> Any:
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, set):
        return sorted(_plain(v) for v in value)
    return value


# Items keep as top-level attributes only what DynamoDB itself uses: keys, index keys, and the
# attributes conditions and TTL read. Everything else travels in one JSON document, ``doc``.
# Attribute names count towards item size and write units, so small flat items are also the
# cheap ones; nothing ever queries inside the document.
DOC = "doc"
CONTROL = "control"
"""The table of control records: idempotency keys, slots, watermarks, heartbeats, counters, locks."""

TOP_LEVEL: dict[str, frozenset[str]] = {
    "tasks": frozenset({"task_id", "tenant", "state", "version"}),
    "runs": frozenset({"run_id", "task_id", "scheduled_for", "state", "updated_at", "audit_seq", "rev", TTL}),
    "audit": frozenset({"subject", "seq", TTL}),
    "outbox": frozenset(
        {"event_id", "detail_type", "source", "detail", "subject", "created_at", "expires_at"}
    ),
    "workorders": frozenset({"work_order_id", "state", "opened_at", "audit_seq"}),
    CONTROL: frozenset({"pk", "expires_at", "version"}),  # version: guards a versioned record
    "policies": frozenset({"name", "version"}),
    "tenants": frozenset({"tenant"}),
    dlq_items.TABLE: dlq_items.TOP_LEVEL,
}


DEFLATE_FROM = 160
"""Documents shorter than this (bytes of JSON) stay text: deflating them saves next to nothing."""


LOOKAHEAD = 262
"""zlib keeps this much of its window free for what comes next: a match reaches back at most the
window less this."""


def pack_doc(text: str) -> str | bytes:
    """``doc`` as stored: deflated (raw deflate, no header) when that is smaller, else the text.

    The window is the smallest power of two that holds the whole document and zlib's lookahead
    (so no match is lost), and the compressor's memory is sized to it: a 1 KB document then
    costs about 40 KB of state instead of about 400 KB, whose setting up made each call several
    times slower than the deflating itself. ``unpack_doc`` inflates any window up to 32 KB."""
    raw = text.encode()
    if len(raw) < DEFLATE_FROM:
        return text
    window = max(9, min(15, (len(raw) + LOOKAHEAD).bit_length()))
    packer = zlib.compressobj(6, zlib.DEFLATED, -window, max(1, min(8, window - 4)))
    packed = packer.compress(raw) + packer.flush()
    return packed if len(packed) < len(raw) else text


def unpack_doc(stored: Any) -> str:
    """The JSON text of a stored ``doc``: text as it is, binary inflated."""
    if isinstance(stored, str):
        return stored
    raw = bytes(stored.value) if isinstance(stored, Binary) else bytes(stored)  # type: ignore[attr-defined]
    return zlib.decompress(raw, -15).decode()


def _dynamo_value(value: Any) -> Any:
    """JSON-compatible value -> what TypeSerializer accepts (Decimal instead of float)."""
    if isinstance(value, float):
        return Decimal(repr(value))
    if isinstance(value, dict):
        return {k: _dynamo_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_dynamo_value(v) for v in value]
    return value


_NUMBER_LIMIT = 10**38
"""Integers below this in magnitude fit DynamoDB's 38 digits: ``TypeSerializer`` writes them as
``str``; larger ones go through it (and its error)."""


def _attribute(value: Any) -> Any:
    """``TypeSerializer().serialize(_dynamo_value(value))``, without the serializer's chain of type
    checks for the common JSON types (str, bool, int, None, dict, list); every other value (floats,
    Decimals, bytes, sets, subclasses) goes through the serializer itself. Every write of every
    record serialises its attributes, so this is on each Lambda invocation's path."""
    kind = type(value)
    if kind is str:
        return {"S": value}
    if kind is bool:
        return {"BOOL": value}
    if kind is int and -_NUMBER_LIMIT < value < _NUMBER_LIMIT:
        return {"N": str(value)}
    if value is None:
        return {"NULL": True}
    if kind is dict:
        return {"M": {k: _attribute(v) for k, v in value.items()}}
    if kind is list or kind is tuple:
        return {"L": [_attribute(v) for v in value]}
    if kind is bytes:
        return {"B": value}
    return _SER.serialize(_dynamo_value(value))


def to_item(data: Mapping[str, Any], table: str | None = None) -> Item:
    """A DynamoDB item; with ``table``, the attributes DynamoDB does not use go into ``doc``.

    ``None`` values are left out, so sparse indexes stay sparse.
    """
    flat: dict[str, Any] = {key: value for key, value in data.items() if value is not None}
    keep = TOP_LEVEL.get(table) if table is not None else None
    if table == "runs" and keep is not None and not in_state_index(flat):
        keep = keep - STATE_INDEX_KEYS
        if found_by_fire(flat):
            keep = keep - TASK_INDEX_KEYS
    if keep is not None:
        doc = {key: value for key, value in flat.items() if key not in keep}
        flat = {key: value for key, value in flat.items() if key in keep}
        if doc:
            flat[DOC] = pack_doc(dumps(doc))
    return {key: _attribute(value) for key, value in flat.items()}


def _number(text: str) -> int | float:
    try:
        return int(text)
    except ValueError:
        return _plain(Decimal(text))  # type: ignore[no-any-return]


def _value(value: Mapping[str, Any]) -> Any:
    """One attribute value as ``_plain(TypeDeserializer().deserialize(value))`` gives it, without
    the deserializer's per-value dispatch for the common types (S, N, BOOL, NULL, M, L)."""
    if "S" in value:
        return value["S"]
    if "N" in value:
        return _number(value["N"])
    if "M" in value:
        return {k: _value(v) for k, v in value["M"].items()}
    if "L" in value:
        return [_value(v) for v in value["L"]]
    if "BOOL" in value:
        return bool(value["BOOL"])
    if "NULL" in value:
        return None
    other: Any = value
    if isinstance(other.get("B"), str):  # a raw answer (``raw_answers``) keeps binary in base64
        other = {"B": base64.b64decode(other["B"])}
    return _plain(_DESER.deserialize(other))


def from_item(item: Mapping[str, Any], *, plain: bool = False) -> dict[str, Any]:
    """A record from a DynamoDB item (as botocore parses it, or raw: ``raw_answers``), without its
    ``ttl`` (``rebound.resources.RECORD_TTL``). With
    ``plain``, integral numbers in ``doc`` read as ints too (``jsonutil.plain_loads``), as the
    attributes' numbers always do."""
    # Text, most attributes, is read here rather than through a call of ``_value`` each.
    out = {key: value["S"] if "S" in value else _value(value) for key, value in item.items()}
    doc = out.pop(DOC, None)
    out.pop(TTL, None)  # when DynamoDB may delete it: storage, not the record
    if doc is not None:
        text = unpack_doc(doc)
        out.update(plain_loads(text) if plain else loads(text))
    return out
