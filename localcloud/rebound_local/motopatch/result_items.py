"""Patch 19, result items: the items a read returns are measured and converted without a call per value.

Every ``Query`` and ``BatchGetItem`` measures each item it returns twice (``Item.size``, for the 1
MB and 16 MB page limits: each attribute's name encoded and its value asked its type), and its
answer is then walked by ``dynamo_to_dict``, one recursive call per attribute value and one more per
plain value inside it. The sweeper reads the open work orders every minute and the run ledger a
hundred runs every five, so a simulated day made about 350,000 of these calls for its work orders
alone.

- ``Item.size``: ``dynamo_values.attrs_size``, which counts an ASCII name or string value by its
  characters (one byte each in UTF-8) and measures every other name or value as moto does.
- ``dynamo_to_dict``: a dict's string, number, boolean and null values whose value is a plain
  ``str`` or ``bool`` become ``{type: value}`` at once, as moto's walk makes them; everything else
  (binaries, sets, lists, maps, dates, objects with ``to_json``) goes through moto's own function.

The answers are the same: ``tests/integration/test_motopatch.py`` compares both with moto's own
code for items of every type.
"""

from __future__ import annotations

from typing import Any

MOTO: dict[str, Any] = {}
"""moto's own ``Item.size`` and ``dynamo_to_dict`` (for the test that compares them)."""

_PLAIN = frozenset({"S", "N", "BOOL", "NULL"})


def _patch_result_items() -> None:
    import moto.dynamodb.responses as responses
    from moto.dynamodb.models.dynamo_type import DynamoType, Item, LimitedSizeDict
    from moto.dynamodb.models.utilities import dynamo_to_dict

    from rebound_local.motopatch.dynamo_values import attrs_size

    moto_size = Item.size
    MOTO.update(size=moto_size, dynamo_to_dict=dynamo_to_dict)

    def item_size(self: Any) -> int:
        return attrs_size(self.attrs)

    dict_types = (dict, LimitedSizeDict)

    def to_dict(obj: Any) -> Any:
        if obj.__class__ in dict_types:
            out = {}
            for name, value in obj.items():
                if value.__class__ is DynamoType and value.type in _PLAIN:
                    inner = value.value
                    if inner.__class__ is str or inner.__class__ is bool:
                        out[name] = {value.type: inner}
                        continue
                out[name] = to_dict(value)
            return out
        if obj.__class__ is list:
            return [to_dict(value) for value in obj]
        return dynamo_to_dict(obj)

    Item.size = item_size  # type: ignore[method-assign]
    responses.dynamo_to_dict = to_dict  # type: ignore[attr-defined]
