"""Patches that make moto a faithful and fast stand-in for what Rebound relies on.

moto is pinned (requirements/constraints.txt) and ``tests/integration/test_motopatch.py`` pins
the behaviour each patch provides, so an upgrade that breaks one fails loudly.

1. **Clock.** moto reads time through ``moto.core.utils.utcnow``. Routing it through the local
   runtime's clock makes ``DelaySeconds``, visibility timeouts, retention and timestamps follow
   virtual time, so hours of schedule time pass in seconds with SQS semantics intact.
2. **Atomicity.** AWS applies each conditional write atomically; moto's threaded server does not
   lock, so two concurrent conditional puts could both succeed. One re-entrant lock around every
   moto action restores linearizable reads and writes (long-polling receives excepted).
3. **Transactions.** moto backs up every table touched by ``TransactWriteItems`` with a deep copy
   (cost grows with table size) and leaves stream records of rolled-back writes behind. The
   replacement checks every condition first and writes only if all pass, as DynamoDB does.
4. **SQS receive.** moto recomputes all queue attributes for every message received; the
   retention check needs one of them.
5. **Change counters.** Schedule changes bump ``versions["scheduler"]`` so the local Scheduler
   re-reads schedules only when something changed.
6. **Queries.** moto answers every ``Query`` by sorting and filtering the whole table. The patch
   keeps, per table, which items each global secondary index's partition key value holds
   (updated on every put, delete and update), and hands moto's own query code only the items of
   the requested partition; its key conditions, filters, sorting and paging then run unchanged.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

LOCK = threading.RLock()
_state: dict[str, Any] = {"installed": False, "clock": None}
versions: dict[str, int] = {"scheduler": 0}
"""Bumped on every change to a service's definitions, so the runtime re-reads only then."""


def set_clock(now: Callable[[], datetime] | None) -> None:
    """Make moto read time from ``now`` (an aware datetime); ``None`` restores the wall clock."""
    _state["clock"] = now


def _utcnow() -> datetime:
    clock = _state["clock"]
    if clock is None:
        return datetime.now(UTC).replace(tzinfo=None)
    value: datetime = clock()
    return value.astimezone(UTC).replace(tzinfo=None)


def install() -> None:
    """Apply the patches once per process. Safe to call again."""
    with LOCK:
        if _state["installed"]:
            return
        _patch_clock()
        _patch_lock()
        _patch_transactions()
        _patch_sqs_retention()
        _patch_scheduler_versions()
        _patch_query_index()
        _state["installed"] = True


def _unix_time(dt: datetime | None = None) -> float:
    if dt is not None:
        return (dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt).timestamp()
    clock = _state["clock"]
    return (clock() if clock is not None else datetime.now(UTC)).timestamp()


def _unix_time_millis(dt: datetime | None = None) -> float:
    return _unix_time(dt) * 1000.0


def _patch_clock() -> None:
    import moto.core.utils as utils
    import moto.sqs.models as sqs_models

    utils.utcnow = _utcnow
    # SQS asks for the time for every message it looks at; answer without datetime round trips.
    for module in (utils, sqs_models):
        module.unix_time = _unix_time  # type: ignore[attr-defined]
        module.unix_time_millis = _unix_time_millis  # type: ignore[attr-defined]


def _patch_lock() -> None:
    from moto.core.responses import BaseResponse

    original = BaseResponse.call_action

    def call_action(self: Any) -> Any:
        if _is_long_poll(self):
            return original(self)
        with LOCK:
            return original(self)

    BaseResponse.call_action = call_action  # type: ignore[method-assign]


def _is_long_poll(response: Any) -> bool:
    try:
        if response._get_action() != "ReceiveMessage":
            return False
        wait = response._get_param("WaitTimeSeconds")
    except Exception:
        return False
    return bool(wait) and int(wait) > 0


def _patch_transactions() -> None:
    from moto.dynamodb.comparisons import get_filter_expression
    from moto.dynamodb.exceptions import (
        MultipleTransactionsException,
        TooManyTransactionsException,
        TransactionCanceledException,
        TransactWriteSingleOpException,
    )
    from moto.dynamodb.models import DynamoDBBackend

    def transact_write_items(self: Any, transact_items: list[dict[str, Any]]) -> None:
        if len(transact_items) > 100:
            raise TooManyTransactionsException()
        seen: set[tuple[str, str]] = set()
        plans: list[tuple[str, dict[str, Any], str, dict[str, Any]]] = []
        errors: list[tuple[str | None, str | None, Any]] = []
        for item in transact_items:
            if len(item) > 1:
                raise TransactWriteSingleOpException
            op_type, op = next(iter(item.items()))
            if op_type not in {"ConditionCheck", "Put", "Delete", "Update"}:
                raise ValueError("Unsupported transaction operation")
            table_name = op["TableName"]
            table = self.get_table(table_name)
            if op_type == "Put":
                attrs = op["Item"]
                key = {table.hash_key_attr: attrs[table.hash_key_attr]}
                if table.range_key_attr is not None:
                    key[table.range_key_attr] = attrs[table.range_key_attr]
            else:
                key = op["Key"]
            marker = (str(table_name), str(dict(sorted(key.items()))))
            if marker in seen:
                raise MultipleTransactionsException()
            seen.add(marker)
            current = self.get_item(table_name, key)
            condition = op.get("ConditionExpression")
            if condition is not None:
                expr = get_filter_expression(
                    condition, op.get("ExpressionAttributeNames"), op.get("ExpressionAttributeValues")
                )
                if not expr.expr(current):
                    old = None
                    if op.get("ReturnValuesOnConditionCheckFailure") == "ALL_OLD" and current:
                        old = current.to_json()["Attributes"]
                    errors.append(("ConditionalCheckFailed", "The conditional request failed", old))
                    continue
            errors.append((None, None, None))
            plans.append((op_type, op, table_name, key))
        if any(code is not None for code, _, _ in errors):
            raise TransactionCanceledException(errors)

        # Every condition holds: apply, keeping what is needed to undo a validation failure.
        undo: list[tuple[str, dict[str, Any], Any]] = []
        streams = {
            name: len(t.stream_shard.items)
            for name, t in self.tables.items()
            if getattr(t, "stream_shard", None) is not None
        }
        try:
            for op_type, op, table_name, key in plans:
                if op_type == "ConditionCheck":
                    continue
                before = self.get_item(table_name, key)
                # Put and Delete replace the stored Item object; only Update mutates it in place.
                undo.append((table_name, key, copy.deepcopy(before) if op_type == "Update" else before))
                names = op.get("ExpressionAttributeNames")
                values = op.get("ExpressionAttributeValues")
                if op_type == "Put":
                    self.put_item(
                        table_name,
                        op["Item"],
                        expression_attribute_names=names,
                        expression_attribute_values=values,
                    )
                elif op_type == "Delete":
                    self.delete_item(
                        table_name, key, expression_attribute_names=names, expression_attribute_values=values
                    )
                else:
                    self.update_item(
                        table_name,
                        key,
                        update_expression=op["UpdateExpression"],
                        expression_attribute_names=names,
                        expression_attribute_values=values,
                    )
        except Exception as exc:
            for table_name, key, before in reversed(undo):
                table = self.get_table(table_name)
                if before is None:
                    table.delete_item(*_key_values(table, key))
                else:
                    table.put_item(before.to_json()["Attributes"])
            for name, length in streams.items():
                shard = self.tables[name].stream_shard
                del shard.items[length:]
            failed = len(undo) - 1
            reasons: list[tuple[str | None, str | None, Any]] = [(None, None, None)] * len(transact_items)
            reasons[failed] = (type(exc).__name__, str(exc), None)
            raise TransactionCanceledException(reasons) from exc

    DynamoDBBackend.transact_write_items = transact_write_items  # type: ignore[method-assign]


def _key_values(table: Any, key: dict[str, Any]) -> tuple[Any, Any]:
    from moto.dynamodb.models.dynamo_type import DynamoType

    hash_value = DynamoType(key[table.hash_key_attr])
    range_value = DynamoType(key[table.range_key_attr]) if table.range_key_attr else None
    return hash_value, range_value


def _patch_sqs_retention() -> None:
    from moto.core.utils import unix_time
    from moto.sqs.models import SQSBackend

    def is_message_valid_based_on_retention_period(self: Any, queue_name: str, message: Any) -> bool:
        queue = self.get_queue(queue_name)
        retain_until = int(queue.message_retention_period) + message.sent_timestamp / 1000
        return bool(retain_until > unix_time())

    SQSBackend.is_message_valid_based_on_retention_period = is_message_valid_based_on_retention_period  # type: ignore[method-assign]


def _patch_scheduler_versions() -> None:
    from moto.scheduler.models import EventBridgeSchedulerBackend

    for name in ("create_schedule", "update_schedule", "delete_schedule", "delete_schedule_group"):
        original = getattr(EventBridgeSchedulerBackend, name)

        def bumped(self: Any, *args: Any, _original: Any = original, **kwargs: Any) -> Any:
            try:
                return _original(self, *args, **kwargs)
            finally:
                versions["scheduler"] += 1

        setattr(EventBridgeSchedulerBackend, name, bumped)


class _PartitionIndex:
    """For one table: partition value -> primary keys, per single-attribute GSI partition key."""

    def __init__(self, table: Any) -> None:
        self.attrs: dict[str, str] = {}
        for index in table.global_indexes:
            hashes = [k["AttributeName"] for k in index.schema if k["KeyType"] == "HASH"]
            if len(hashes) == 1:
                self.attrs[index.name] = hashes[0]
        self.buckets: dict[str, dict[Any, set[Any]]] = {name: {} for name in self.attrs}
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
                bucket.discard(pk)
                if not bucket:
                    del self.buckets[name][value]

    def place(self, item: Any) -> None:
        pk = self.key(item)
        self.remove(pk)
        placed: dict[str, Any] = {}
        for name, attr in self.attrs.items():
            value = item.attrs.get(attr)
            if value is not None:
                self.buckets[name].setdefault(value, set()).add(pk)
                placed[name] = value
        self.placed[pk] = placed


def _index_of(table: Any) -> _PartitionIndex:
    index: _PartitionIndex | None = table.__dict__.get("_rebound_partitions")
    if index is None:
        index = _PartitionIndex(table)
        table.__dict__["_rebound_partitions"] = index
    return index


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
                keys = partitions.buckets[index_name].get(hash_key_conditions[0][1], set())
                candidates = [item for item in (self.get_item(h, r) for h, r in keys) if item is not None]
        if candidates is None:
            return original()
        ordered = sorted(candidates, key=lambda x: (x.hash_key, x.range_key) if x.range_key else x.hash_key)
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
