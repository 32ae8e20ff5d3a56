"""Patch 12, scans: a table's ``Scan`` page reads from where the last one stopped.

moto answers every page of a ``Scan`` by gathering the whole table, sorting it with its attribute
value objects' comparisons (a Python call per key comparison), then walking from the first item
to the page's ``ExclusiveStartKey`` comparing keys the same way; with ``TotalSegments`` every
segment does all of that and hashes every item's partition key again. A scan of n items in pages
of p therefore costs about n²/p comparisons: about 2,000 items a second for a 15,000-item audit
table, which bounded ``audit verify --all`` (docs/performance.md). DynamoDB reads a page from
where the last stopped.

The patch, for a scan of the table itself (not an index): orders the partitions by their key's
plain value (a string, number or bytes, as moto's comparisons order them), keeps only the
partitions of the requested segment (moto's own ``is_within_segment`` of each partition's first
item, so every segment holds the same partitions as unpatched), starts after the start key by
bisection, and hands that run of items to moto's own scan loop (limit, 1 MB page size, legacy
filters, filter expression, projection, ``LastEvaluatedKey`` unchanged). A scan of an index goes
through moto unchanged. ``tests/integration/test_motopatch.py`` checks every page of every
segment is the one moto would have answered.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

_STAGED = threading.local()
"""The items ``scan_from`` hands moto's scan loop, by table, for the call under way in this thread."""


def _plain(value: Any) -> Any:
    """The value moto's key comparisons order by: a number as a number (its ``cast_value``),
    anything else as is."""
    return Decimal(value.value) if value.type == "N" else value.value


def _partition_key(partition: tuple[Any, Any]) -> Any:
    return _plain(partition[0])


def _range_key(item: Any) -> Any:
    return _plain(item.range_key)


def _plain_key(raw: dict[str, Any]) -> Any:
    from moto.dynamodb.models.dynamo_type import DynamoType

    return _plain(DynamoType(raw))


def items_from(
    table: Any,
    start: dict[str, Any] | None,
    segments: tuple[Any, Any],
    of_segment: Callable[[list[tuple[Any, Any]]], list[tuple[Any, Any]]] | None = None,
) -> Iterator[Any]:
    """The table's items in moto's scan order, of the segment, after the ``start`` key: as moto's
    loop asks for them, so a page sorts only the partitions it reads. A partition is in the
    segment if moto's ``is_within_segment`` says so of its first item or, with ``of_segment``
    (which keeps the segment's ``(key, partition)`` pairs), if ``of_segment`` keeps it; then
    only the segment's partitions are sorted."""
    partitions: list[tuple[Any, Any]] = list(table.items.items())
    if of_segment is not None:
        partitions = of_segment(partitions)
    partitions.sort(key=_partition_key)
    first = 0
    after_range: Any = None
    if start is not None:
        plain = [_plain(key) for key, _ in partitions]
        hash_value = _plain_key(start[table.hash_key_attr])
        if table.range_key_attr is not None and table.range_key_attr in start:
            first = bisect.bisect_left(plain, hash_value)
            if first < len(plain) and plain[first] == hash_value:
                after_range = _plain_key(start[table.range_key_attr])
        else:
            first = bisect.bisect_right(plain, hash_value)
    for index in range(first, len(partitions)):
        held = partitions[index][1]
        if table.range_key_attr is None:
            if of_segment is not None or held.is_within_segment(segments):
                yield held
            continue
        if not held:
            continue
        if of_segment is None and not next(iter(held.values())).is_within_segment(segments):
            continue
        ordered = sorted(held.values(), key=_range_key) if len(held) > 1 else list(held.values())
        if index == first and after_range is not None:
            ranges = [_range_key(item) for item in ordered]
            ordered = ordered[bisect.bisect_right(ranges, after_range) :]
        yield from ordered


MOTO: dict[str, Any] = {}
"""moto's own ``Table.scan`` and ``Table.all_items``, kept for the test that compares answers."""


def _patch_table_scan() -> None:
    from moto.dynamodb.models.table import Table

    scan = Table.scan
    all_items = Table.all_items
    MOTO.update(scan=scan, all_items=all_items)

    def scan_from(
        self: Any, filters: Any, limit: Any, exclusive_start_key: Any, *args: Any, **kwargs: Any
    ) -> Any:
        index_name = kwargs.get("index_name", args[1] if len(args) > 1 else None)
        if index_name:
            return scan(self, filters, limit, exclusive_start_key, *args, **kwargs)
        segments = kwargs.get("segments", args[4] if len(args) > 4 else (None, None))
        staged = _STAGED.__dict__.setdefault("tables", {})
        staged[id(self)] = items_from(self, exclusive_start_key, segments)
        from_the_first: Any = None  # the staged items start after the start key already
        try:
            return scan(self, filters, limit, from_the_first, *args, **kwargs)
        finally:
            del staged[id(self)]

    def items_for_scan(self: Any) -> Any:
        staged = _STAGED.__dict__.get("tables", {}).get(id(self))
        return staged if staged is not None else all_items(self)

    Table.scan = scan_from  # type: ignore[method-assign]
    Table.all_items = items_for_scan  # type: ignore[method-assign]
