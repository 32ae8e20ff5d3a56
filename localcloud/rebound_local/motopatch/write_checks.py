"""Patch 17, write checks: the checks moto runs on every item written skip what cannot fail.

Before each put moto walks every attribute of the item (``Table._validate_item_types``: a
recursive call per attribute, a float parse per number) and builds a ``DynamoType`` of each key
of the table and of its indexes to measure it (``Table._validate_key_sizes``). A simulated day
writes about 140,000 items, and the two checks were a third of moto's own time in a put.

- An attribute that is a string, a boolean, or a number written as up to 38 plain digits (every
  attribute of most items Rebound writes) cannot fail the type check: it is passed over, and every
  other attribute goes through moto's own check, one by one, in the same order.
- A key that is a string of at most a quarter of its limit in characters (UTF-8 spends at most 4
  bytes on a character) cannot be too long: it is passed over; any other goes through moto's
  measurement. The names of the keys (the table's and its indexes') are listed once per table,
  and again when its indexes change.

So the same items fail with the same errors: ``tests/integration/test_motopatch.py`` writes
items of every type, too-long keys and invalid numbers through both.
"""

from __future__ import annotations

from typing import Any

MOTO: dict[str, Any] = {}
"""moto's own ``Table._validate_item_types`` and ``Table._validate_key_sizes`` (for the test)."""

_CHECKED_NAMES = frozenset({"N", "S", "NULL"})
"""Attribute names moto's type check treats as type tags even at the top level."""
_PLAIN_DIGITS = 38


def _cannot_fail(value: Any) -> bool:
    """A top-level attribute value moto's type check passes whatever the table."""
    if value.__class__ is not dict or len(value) != 1:
        return False
    if value.get("S").__class__ is str:
        return True
    inner = value.get("N")
    if inner.__class__ is str:
        return bool(inner.isascii() and inner.isdigit() and len(inner) <= _PLAIN_DIGITS)
    return value.get("BOOL").__class__ is bool


def _patch_write_checks() -> None:
    from moto.dynamodb.exceptions import HashKeyTooLong, RangeKeyTooLong
    from moto.dynamodb.limits import HASH_KEY_MAX_LENGTH, RANGE_KEY_MAX_LENGTH
    from moto.dynamodb.models.dynamo_type import DynamoType
    from moto.dynamodb.models.table import Table

    moto_types = Table._validate_item_types
    moto_sizes = Table._validate_key_sizes
    MOTO.update(_validate_item_types=moto_types, _validate_key_sizes=moto_sizes)

    def validate_item_types(self: Any, item_attrs: dict[str, Any], attr: str | None = None) -> None:
        if attr is not None:  # moto's own recursion
            moto_types(self, item_attrs, attr)
            return
        for name, value in item_attrs.items():
            if name in _CHECKED_NAMES or not _cannot_fail(value):
                moto_types(self, {name: value})

    def key_names(table: Any) -> tuple[list[str], list[str]]:
        # The table's and its indexes' keys, as moto lists them, again when its indexes change.
        # The list itself is kept, so a new list is never taken for the old one.
        indexes = table.global_indexes
        marker = (len(indexes), table.hash_key_attr, table.range_key_attr)
        known = table.__dict__.get("_rebound_key_names")
        if known is None or known[0] is not indexes or known[1] != marker:
            known = table._rebound_key_names = (indexes, marker, table.hash_key_names, table.range_key_names)
        return known[2], known[3]

    def validate_key_sizes(self: Any, item_attrs: dict[str, Any]) -> None:
        hash_names, range_names = key_names(self)
        for names, limit, error in (
            (hash_names, HASH_KEY_MAX_LENGTH, HashKeyTooLong),
            (range_names, RANGE_KEY_MAX_LENGTH, RangeKeyTooLong),
        ):
            for name in names:
                value = item_attrs.get(name)
                if not value:
                    continue
                text = value.get("S") if type(value) is dict and len(value) == 1 else None
                if type(text) is str and len(text) * 4 <= limit:
                    continue
                if DynamoType(value).size() > limit:
                    raise error

    Table._validate_item_types = validate_item_types  # type: ignore[method-assign]
    Table._validate_key_sizes = validate_key_sizes  # type: ignore[method-assign]
