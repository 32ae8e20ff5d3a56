"""Patch 6, queries: a ``Query`` reads one partition instead of the whole table.

moto answers every ``Query`` by sorting and filtering the whole table. The patch keeps, per table,
which items each global secondary index's partition key value holds (updated on every put, delete
and update), and hands moto's own query code only the items of the requested partition, within the
key condition's range of a string sort key (``_in_range``); its key conditions, filters, sorting
and paging then run unchanged. Owns the partition index
(``_index_of``) and the hook index lag uses (``INDEX_VIEW``, set by ``hostile``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class _PartitionIndex:
    """For one table: partition value -> primary keys, per single-attribute GSI partition key."""

    def __init__(self, table: Any) -> None:
        self.attrs: dict[str, str] = {}
        self.ranges: dict[str, str] = {}
        for index in table.global_indexes:
            hashes = [k["AttributeName"] for k in index.schema if k["KeyType"] == "HASH"]
            ranges = [k["AttributeName"] for k in index.schema if k["KeyType"] == "RANGE"]
            if len(hashes) == 1:
                self.attrs[index.name] = hashes[0]
                if len(ranges) == 1:
                    self.ranges[index.name] = ranges[0]
        self.buckets: dict[str, dict[Any, dict[Any, Any]]] = {name: {} for name in self.attrs}
        """index -> partition value -> primary key -> the item as stored now (replaced on every put)."""
        self.placed: dict[Any, dict[str, Any]] = {}
        for item in table.all_items():
            self.place(item)

    @staticmethod
    def key(item: Any) -> Any:
        return (item.hash_key, item.range_key)

    def remove(self, pk: Any) -> None:
        for name, value in self.placed.pop(pk, {}).items():
            bucket = self.buckets[name].get(value)
            if bucket is not None:
                bucket.pop(pk, None)
                if not bucket:
                    del self.buckets[name][value]

    def place(self, item: Any) -> None:
        pk = self.key(item)
        self.remove(pk)
        placed: dict[str, Any] = {}
        for name, attr in self.attrs.items():
            value = item.attrs.get(attr)
            if value is not None:
                self.buckets[name].setdefault(value, {})[pk] = item
                placed[name] = value
        self.placed[pk] = placed


INDEX_VIEW: list[Callable[[Any, str, Any, list[Any]], list[Any]] | None] = [None]
"""What an index query sees instead of the partition's present items (set by ``hostile``)."""


def _index_of(table: Any) -> _PartitionIndex:
    index: _PartitionIndex | None = table.__dict__.get("_rebound_partitions")
    if index is None:
        index = _PartitionIndex(table)
        table.__dict__["_rebound_partitions"] = index
    return index


def _in_range(candidates: list[Any], attr: str | None, comparison: str | None, objs: Any) -> list[Any]:
    """The candidates whose string sort key meets the key condition, judged as moto's own query
    judges it (its comparison functions) before moto sorts them: a range of a large partition
    (runs by state since an hour ago) costs what it holds, not what the partition holds."""
    if attr is None or not comparison or not objs or any(o.type != "S" for o in objs):
        return candidates
    from moto.dynamodb.comparisons import get_comparison_func

    compare = get_comparison_func(comparison)
    if compare is None:
        return candidates
    bounds = [o.value for o in objs]
    kept = []
    for item in candidates:
        value = item.attrs.get(attr)
        if value is not None and value.type == "S" and compare(value.value, *bounds):
            kept.append(item)
    return kept


def _patch_query_index() -> None:
    from moto.dynamodb.models import DynamoDBBackend
    from moto.dynamodb.models.table import Table

    put_item, delete_item, query = Table.put_item, Table.delete_item, Table.query

    def indexed_put(self: Any, *args: Any, **kwargs: Any) -> Any:
        item = put_item(self, *args, **kwargs)
        if "_rebound_partitions" in self.__dict__ and item is not None:
            self.__dict__["_rebound_partitions"].place(item)
        return item

    def indexed_delete(self: Any, hash_key: Any, range_key: Any = None) -> Any:
        item = delete_item(self, hash_key, range_key)
        if "_rebound_partitions" in self.__dict__ and item is not None:
            self.__dict__["_rebound_partitions"].remove(_PartitionIndex.key(item))
        return item

    def indexed_query(
        self: Any,
        hash_key: Any,
        range_comparison: Any,
        range_objs: Any,
        limit: Any,
        exclusive_start_key: Any,
        scan_index_forward: Any,
        projection_expressions: Any,
        index_name: str | None = None,
        consistent_read: bool = False,
        filter_expression: Any = None,
        hash_key_conditions: list[tuple[str, Any]] | None = None,
        range_key_conditions: Any = None,
        **filter_kwargs: Any,
    ) -> Any:
        def original() -> Any:
            return query(
                self,
                hash_key,
                range_comparison,
                range_objs,
                limit,
                exclusive_start_key,
                scan_index_forward,
                projection_expressions,
                index_name,
                consistent_read,
                filter_expression,
                hash_key_conditions=hash_key_conditions,
                range_key_conditions=range_key_conditions,
                **filter_kwargs,
            )

        candidates: list[Any] | None = None
        if index_name is None and hash_key is not None:
            found = self.items.get(hash_key)
            if found is None:
                candidates = []
            else:
                candidates = list(found.values()) if self.range_key_attr else [found]
        elif index_name is not None:
            partitions = _index_of(self)
            if index_name in partitions.attrs and hash_key_conditions and len(hash_key_conditions) == 1:
                candidates = list(partitions.buckets[index_name].get(hash_key_conditions[0][1], {}).values())
                if INDEX_VIEW[0] is not None:  # index lag (rebound_local.hostile)
                    candidates = INDEX_VIEW[0](self, index_name, hash_key_conditions[0][1], candidates)
                candidates = _in_range(
                    candidates, partitions.ranges.get(index_name), range_comparison, range_objs
                )
        if candidates is None:
            return original()
        # A table's keys have one type each: their raw values order as the typed ones, faster.
        ordered = sorted(
            candidates,
            key=lambda x: (x.hash_key.value, x.range_key.value) if x.range_key else x.hash_key.value,
        )
        self.__dict__["all_items"] = lambda: ordered
        try:
            return original()
        finally:
            del self.__dict__["all_items"]

    update_item = DynamoDBBackend.update_item

    def reindexing_update(self: Any, table_name: str, key: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        item = update_item(self, table_name, key, *args, **kwargs)
        table = self.get_table(table_name)
        if "_rebound_partitions" in table.__dict__ and item is not None:
            table.__dict__["_rebound_partitions"].place(item)
        return item

    Table.put_item = indexed_put  # type: ignore[method-assign]
    Table.delete_item = indexed_delete  # type: ignore[method-assign]
    Table.query = indexed_query  # type: ignore[method-assign]
    DynamoDBBackend.update_item = reindexing_update  # type: ignore[method-assign]
