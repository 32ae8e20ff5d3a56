"""Patch 16, projections: an item projected onto top-level attributes converts only those.

moto's ``Item.project`` turns every attribute of the item into a plain Python value (a deep copy
and a type walk each), picks the named ones out, and turns those back into attribute values. The
run ledger asks every minute which of the runs it expects exist, a hundred keys at a time with a
projection of the key alone (``Store.existing_runs``), so a simulated day projected some 29,000
items of thirty attributes each to keep one. A projection whose every path is one top-level name
(no ``a.b``, no ``a[1]``) now converts only the attributes it names, each exactly as moto
converts it (its deserializer, then its serializer; a string, which those give back as it was,
is copied); any other projection goes through moto's own code.
``tests/integration/test_motopatch.py`` compares the answers with moto's for every attribute
type, for names that are missing, repeated, nested and indexed.
"""

from __future__ import annotations

import re
from typing import Any

MOTO: dict[str, Any] = {}
"""moto's own ``Item.project`` (for the test that compares them)."""

_INDEXED = re.compile(r"(.+)\[(\d+)\]$")
"""A path element that indexes a list (``steps[2]``): moto's own pattern for it."""


def _patch_projections() -> None:
    from moto.dynamodb.models import dynamo_type
    from moto.dynamodb.models.dynamo_type import Item

    moto_project = Item.project
    MOTO["project"] = moto_project

    def project(self: Any, projection_expressions: list[list[str]]) -> Any:
        if not all(len(path) == 1 and not _INDEXED.match(path[0]) for path in projection_expressions):
            return moto_project(self, projection_expressions)
        attrs: dict[str, Any] = {}
        for (name,) in projection_expressions:
            value = self.attrs.get(name)
            if value is None:
                continue
            if value.type == "S" and value.value.__class__ is str:
                attrs[name] = {"S": value.value}  # what the two conversions give a string back
            else:
                regular = dynamo_type.deserializer.deserialize(value.to_regular_json())
                attrs[name] = dynamo_type.serializer.serialize(regular)
        return Item(hash_key=self.hash_key, range_key=self.range_key, attrs=attrs)

    Item.project = project  # type: ignore[method-assign]
