"""Patch 15, attribute values: the common value types take the short way through moto's DynamoType.

moto keys a table's items by ``DynamoType`` (its hash and equality go through ``cast_value``,
which asks the value whether it is a number, a set, a list, a map or null before returning it),
builds a ``DynamoType`` from each attribute of every item it stores or reads by listing the
attribute's dict twice, and measures every attribute of every item written through the same
chain of questions. A simulated day reads and writes its keys about a million times, and these
checks were the largest share of moto's own time in its transactions. Strings, binaries and
booleans (every key Rebound has) cast to their own value and numbers to a ``Decimal``, as before,
in one comparison, and strings, binaries and numbers are measured as moto measures them; every
other type (sets, lists, maps, null) goes through moto's code. The answers do not change:
``tests/integration/test_motopatch.py`` compares hashes, equality, sizes and construction with
moto's for every type.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

_SELF_CAST = frozenset({"S", "B", "BOOL"})
MOTO: dict[str, Any] = {}
"""moto's own ``cast_value`` getter, ``__hash__``, ``__eq__``, ``__ne__``, ``__init__`` and ``size``
(for the test that compares them)."""


def attrs_size(attrs: dict[str, Any]) -> int:
    """An item's size as moto measures it (``Item.size``: each name in UTF-8 plus its value's
    ``DynamoType.size``) for a map of attribute names to ``DynamoType``, an ASCII name or string
    value counted by its characters (one byte each) without encoding it."""
    total = 0
    for name, value in attrs.items():
        total += len(name) if name.isascii() else len(name.encode("utf-8"))
        inner = value.value
        total += (
            len(inner) if value.type == "S" and inner.__class__ is str and inner.isascii() else value.size()
        )
    return total


def _patch_dynamo_values() -> None:
    from moto.dynamodb.models.dynamo_type import DynamoType
    from moto.dynamodb.models.utilities import bytesize

    slow_cast = vars(DynamoType)["cast_value"].fget  # the property's getter
    assert slow_cast is not None
    MOTO.update(
        cast_value=slow_cast,
        __hash__=DynamoType.__hash__,
        __eq__=DynamoType.__eq__,
        __ne__=DynamoType.__ne__,
        __init__=DynamoType.__init__,
        size=DynamoType.size,
    )
    slow_size = DynamoType.size

    def cast_value(self: Any) -> Any:
        kind = self.type
        if kind in _SELF_CAST:
            return self.value
        if kind == "N":
            return Decimal(self.value)
        return slow_cast(self)

    def value_hash(self: Any) -> int:
        return hash((self.type, cast_value(self)))

    def value_eq(self: Any, other: Any) -> bool:
        return bool(self.type == other.type and cast_value(self) == cast_value(other))

    def value_ne(self: Any, other: Any) -> bool:
        return bool(self.type != other.type or cast_value(self) != cast_value(other))

    def value_init(self: Any, type_as_dict: Any) -> None:
        if type(type_as_dict) is DynamoType:
            self.type = type_as_dict.type
            self.value = type_as_dict.value
            kind = self.type
        else:
            first = next(iter(type_as_dict.items()), None)  # an attribute value has one entry
            if first is None:
                raise IndexError("an attribute value with no type")  # as moto's list(...)[0]
            kind, self.value = first
            self.type = kind
        if kind == "L":
            self.value = [DynamoType(v) for v in self.value]
        elif kind == "M":
            self.value = {k: DynamoType(v) for k, v in self.value.items()}

    def size(self: Any) -> int:
        # moto's 400 KB check measures every attribute of every item written.
        kind = self.type
        if kind == "S" or kind == "B":
            value = self.value
            return 1 if isinstance(value, bool) else bytesize(value)
        if kind == "N":
            return len(str(self.value))
        return int(slow_size(self))

    DynamoType.size = size  # type: ignore[method-assign]
    DynamoType.cast_value = property(cast_value)  # type: ignore[method-assign,assignment]
    DynamoType.__hash__ = value_hash  # type: ignore[method-assign]
    DynamoType.__eq__ = value_eq  # type: ignore[method-assign]
    DynamoType.__ne__ = value_ne  # type: ignore[method-assign]
    DynamoType.__init__ = value_init  # type: ignore[method-assign]
