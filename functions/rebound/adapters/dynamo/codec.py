"""How Rebound's records become DynamoDB items and back.

An item keeps as top-level attributes only what DynamoDB itself reads (keys, index keys, the
attributes conditions and TTL use); everything else travels in one JSON document, ``doc``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer

from rebound.adapters import dlq_items
from rebound.domain.jsonutil import dumps

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
    "runs": frozenset({"run_id", "task_id", "scheduled_for", "state", "updated_at", "audit_seq", "rev"}),
    "audit": frozenset({"subject", "seq"}),
    "outbox": frozenset(
        {"event_id", "detail_type", "source", "detail", "subject", "created_at", "expires_at"}
    ),
    "workorders": frozenset({"work_order_id", "state", "opened_at", "audit_seq"}),
    CONTROL: frozenset({"pk", "expires_at", "version"}),  # version: guards a versioned record
    "policies": frozenset({"name", "version"}),
    "tenants": frozenset({"tenant"}),
    dlq_items.TABLE: dlq_items.TOP_LEVEL,
}


def _dynamo_value(value: Any) -> Any:
    """JSON-compatible value -> what TypeSerializer accepts (Decimal instead of float)."""
    if isinstance(value, float):
        return Decimal(repr(value))
    if isinstance(value, dict):
        return {k: _dynamo_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_dynamo_value(v) for v in value]
    return value


def to_item(data: Mapping[str, Any], table: str | None = None) -> Item:
    """A DynamoDB item; with ``table``, the attributes DynamoDB does not use go into ``doc``.

    ``None`` values are left out, so sparse indexes stay sparse.
    """
    flat: dict[str, Any] = {key: value for key, value in data.items() if value is not None}
    keep = TOP_LEVEL.get(table) if table is not None else None
    if keep is not None:
        doc = {key: value for key, value in flat.items() if key not in keep}
        flat = {key: value for key, value in flat.items() if key in keep}
        if doc:
            flat[DOC] = dumps(doc)
    return {key: _SER.serialize(_dynamo_value(value)) for key, value in flat.items()}


def from_item(item: Mapping[str, Any]) -> dict[str, Any]:
    out = {key: _plain(_DESER.deserialize(value)) for key, value in item.items()}
    doc = out.pop(DOC, None)
    if isinstance(doc, str):
        out.update(json.loads(doc))
    return out
