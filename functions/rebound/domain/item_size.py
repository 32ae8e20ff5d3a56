"""The size DynamoDB counts for an item, for refusing a task whose writes could not be stored.

DynamoDB counts each attribute as the UTF-8 length of its name plus the size of its value: a
string's UTF-8 length; a number's significant digits / 2 + 1 (at most 21 bytes); 1 for a boolean
or null; a list or map 3 bytes plus 1 per element plus its elements (a map's names included).
Rebound's items keep their keys at the top level and the rest as one JSON string (``doc``,
``rebound.adapters.dynamo.codec``), written by ``jsonutil.dumps``: non-ASCII escaped, so an
``é`` costs 6 bytes there, not 2.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rebound.domain.jsonutil import dumps

ITEM_LIMIT = 400 * 1024
"""DynamoDB's largest item."""
HEADROOM = 24 * 1024
"""Kept free in every estimate for the fields an item gains after it is registered (schedule
names, audit chain heads, operator notes, longer actor names)."""


def value_size(value: Any) -> int:
    if value is None or isinstance(value, bool):
        return 1
    if isinstance(value, int | float):
        digits = len(repr(abs(value)).replace(".", "").lstrip("0").rstrip("0")) or 1
        return min(21, digits // 2 + 2)
    if isinstance(value, str):
        return len(value.encode())
    if isinstance(value, bytes):
        return len(value)
    if isinstance(value, Mapping):
        return 3 + sum(1 + len(str(k).encode()) + value_size(v) for k, v in value.items())
    if isinstance(value, list | tuple | set):
        return 3 + sum(1 + value_size(v) for v in value)
    return len(str(value).encode())


def item_size(top: Mapping[str, Any], doc: Mapping[str, Any] | None = None) -> int:
    """Bytes DynamoDB counts for an item with ``top`` attributes and ``doc`` as its JSON document."""
    size = sum(len(k.encode()) + value_size(v) for k, v in top.items() if v is not None)
    if doc:
        size += len(b"doc") + len(dumps(doc).encode())
    return size


def fits(size: int) -> bool:
    return size + HEADROOM <= ITEM_LIMIT
