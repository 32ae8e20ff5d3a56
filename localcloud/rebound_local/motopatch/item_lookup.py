"""Patch 14, item lookup: a table without a sort key finds an item with one dictionary lookup.

moto's ``Table.get_item`` asks ``hash_key in self.items`` and then reads ``self.items[hash_key]``:
two hashes of the key's ``DynamoType`` (each casting the value through a chain of type checks)
and two equality checks for every read. Every write of the local cloud reads its item several
times (the condition, moto's own put, the billing meter's sizes before and after), so a simulated
day makes hundreds of thousands of these reads. The patch reads a table without a sort key with
one ``dict.get``; a table with a sort key, or a call with a sort key value, goes through moto's
own code. The answers are the same item objects: ``tests/integration/test_motopatch.py``
compares them with moto's for present and missing keys, with and without a projection.
"""

from __future__ import annotations

from typing import Any

MOTO: dict[str, Any] = {}
"""moto's own ``Table.get_item`` (for the test that compares them)."""


def _patch_item_lookup() -> None:
    from moto.dynamodb.models.table import Table

    moto_get_item = Table.get_item
    MOTO["get_item"] = moto_get_item

    def get_item(self: Any, hash_key: Any, range_key: Any = None, projection_expression: Any = None) -> Any:
        if self.range_key_attr is not None or range_key is not None:
            return moto_get_item(self, hash_key, range_key, projection_expression)
        result = self.items.get(hash_key)
        if projection_expression and result:
            result = result.project(projection_expression)
        return result

    Table.get_item = get_item  # type: ignore[method-assign]
