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
   re-reads schedules only when something changed (SQS and stream counters: ``changes``).
6. **Queries.** moto answers every ``Query`` by sorting and filtering the whole table. The patch
   keeps, per table, which items each global secondary index's partition key value holds
   (updated on every put, delete and update), and hands moto's own query code only the items of
   the requested partition; its key conditions, filters, sorting and paging then run unchanged.
7. **Parsing once.** moto parses every condition expression on every write; the parsed tree is
   a pure function of the expression, its names and its values, so it is cached. SQS turns
   attribute names into Python names on every send and draws each receipt handle one character at
   a time; both are made cheap without changing a result.
8. **Message ledger.** With ``track_messages(ledger)``, every message SQS accepts, deletes,
   purges or moves to a dead-letter queue is reported to the ledger, whichever client or path
   (HTTP, in-process, direct, Scheduler, bus rule) caused it. The simulator accounts for every
   message with it.
"""

from __future__ import annotations

import copy
import operator
import threading
import weakref
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

LOCK = threading.RLock()
KEPT_RECEIPT_HANDLES = 8
_RECEIPTS: weakref.WeakValueDictionary[str, Any] = weakref.WeakValueDictionary()
"""Receipt handle -> the message that has it (every handle moto still honours)."""
ITEM_SIZE_LIMIT = 405_000  # moto's figure for DynamoDB's 400 KB item limit
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
        _patch_parsing()
        _patch_sqs_ledger()
        _patch_event_routing()
        _state["installed"] = True
    from rebound_local import changes, hostile, streams

    hostile.install()  # faults inside moto; they pass through until activated
    streams.install()
    changes.install()


_last_now: list[Any] = [None, 0.0]


def _unix_time(dt: datetime | None = None) -> float:
    if dt is not None:
        return (dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt).timestamp()
    clock = _state["clock"]
    if clock is None:
        return datetime.now(UTC).timestamp()
    now = clock()
    # SQS asks for every message it looks at; a virtual clock hands out the same object
    # until it moves, so convert each instant once.
    last = _last_now
    if now is not last[0]:
        last[1] = now.timestamp()
        last[0] = now
    return float(last[1])


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
    import moto.dynamodb.models as ddb_models
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
                # Looked up at call time: the parsing patch caches it.
                expr = ddb_models.get_filter_expression(  # type: ignore[attr-defined]
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
                    # The condition held above, under the same lock: do not evaluate it again.
                    self.put_item(
                        table_name,
                        op["Item"],
                        expression_attribute_names=names,
                        expression_attribute_values=values,
                        overwrite=True,
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


INDEX_VIEW: list[Callable[[Any, str, Any, list[Any]], list[Any]] | None] = [None]
"""What an index query sees instead of the partition's present items (set by ``hostile``)."""


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
                if INDEX_VIEW[0] is not None:  # index lag (rebound_local.hostile)
                    candidates = INDEX_VIEW[0](self, index_name, hash_key_conditions[0][1], candidates)
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


def _patch_parsing() -> None:
    import functools
    import json

    import moto.dynamodb.models as ddb_models
    import moto.dynamodb.models.table as ddb_table
    import moto.sqs.models as sqs_models
    from moto.dynamodb.comparisons import get_filter_expression
    from moto.moto_api._internal import mock_random

    @functools.lru_cache(maxsize=8192)
    def parsed(expr: str | None, names: str, values: str) -> Any:
        return get_filter_expression(expr, json.loads(names), json.loads(values))

    def cached_filter_expression(
        expr: str | None, names: dict[str, str] | None, values: dict[str, Any] | None
    ) -> Any:
        # The parse tree holds the expression's values; it never keeps state between evaluations.
        try:
            key_names = json.dumps(names, sort_keys=True)
            key_values = json.dumps(values, sort_keys=True)
        except TypeError:  # not JSON (binary values): parse as moto would
            return get_filter_expression(expr, names, values)
        return parsed(expr, key_names, key_values)

    ddb_models.get_filter_expression = cached_filter_expression  # type: ignore[attr-defined]
    ddb_table.get_filter_expression = cached_filter_expression  # type: ignore[attr-defined]

    # moto re-measures every attribute already set each time it sets one (quadratic in an
    # item's attributes, and the measuring encodes each string). Measure each once; the
    # 400 KB check is the same, as the size only grows while attributes are added.
    from moto.dynamodb.exceptions import ItemSizeTooLarge
    from moto.dynamodb.models.dynamo_type import DynamoType, Item, LimitedSizeDict
    from moto.dynamodb.models.utilities import bytesize

    def item_init(self: Any, hash_key: Any, range_key: Any, attrs: dict[str, Any]) -> None:
        self.hash_key = hash_key
        self.range_key = range_key
        values = {key: DynamoType(value) for key, value in attrs.items()}
        if sum(bytesize(key) + value.size() for key, value in values.items()) > ITEM_SIZE_LIMIT:
            raise ItemSizeTooLarge
        self.attrs = LimitedSizeDict()
        dict.update(self.attrs, values)

    Item.__init__ = item_init  # type: ignore[method-assign]

    # Query and Scan deep-copy every item they return before projecting it; projection builds
    # a new item or drops keys from the copy's attribute map, and the copy is serialized under
    # the lock before anything can change. A copy of the item with its own attribute map is as
    # safe and skips copying every value. Everything else in the module still deep-copies.
    import moto.dynamodb.models.table as ddb_table

    def copy_item(item: Any) -> Any:
        clone: Any = Item.__new__(Item)
        clone.hash_key = item.hash_key
        clone.range_key = item.range_key
        clone.attrs = LimitedSizeDict()
        dict.update(clone.attrs, item.attrs)
        return clone

    class ItemCopies:
        def __getattr__(self, name: str) -> Any:
            return getattr(copy, name)

        @staticmethod
        def deepcopy(value: Any, memo: Any = None) -> Any:
            if isinstance(value, Item):
                return copy_item(value)
            if isinstance(value, list) and value and all(isinstance(v, Item) for v in value):
                return [copy_item(v) for v in value]
            return copy.deepcopy(value, memo)

    ddb_table.copy = ItemCopies()  # type: ignore[attr-defined,assignment]

    # A bus rule's target input is built from JSONPath expressions, compiled (a yacc parser is
    # built) for every event delivered; the compiled path is a pure function of its text.
    import jsonpath_ng.ext

    jsonpath_ng.ext.parse = functools.lru_cache(maxsize=256)(jsonpath_ng.ext.parse)  # type: ignore[attr-defined]

    sqs_models.camelcase_to_underscores = functools.lru_cache(maxsize=256)(  # type: ignore[attr-defined]
        sqs_models.camelcase_to_underscores  # type: ignore[attr-defined]
    )
    letters = "abcdefghijklmnopqrstuvwxyz"

    def generate_receipt_handle() -> str:
        # The same shape as moto's (185 lowercase letters), drawn in one call.
        return "".join(mock_random.choices(letters, k=185))

    sqs_models.generate_receipt_handle = generate_receipt_handle  # type: ignore[attr-defined]

    # moto keeps every receipt handle a message ever had, and copies them all on each receive:
    # a DLQ message peeked once a minute for a day carries 1,440 of them. SQS only promises
    # that the latest handle deletes; a few earlier ones are kept for late deletes.
    mark_received = sqs_models.Message.mark_received

    def mark_received_trimmed(self: Any, visibility_timeout: int | None = None) -> None:
        mark_received(self, visibility_timeout)
        _RECEIPTS[self.receipt_handle] = self
        if len(self._old_receipt_handles) > KEPT_RECEIPT_HANDLES:
            for handle in self._old_receipt_handles[:-KEPT_RECEIPT_HANDLES]:
                _RECEIPTS.pop(handle, None)
            del self._old_receipt_handles[:-KEPT_RECEIPT_HANDLES]

    sqs_models.Message.mark_received = mark_received_trimmed  # type: ignore[method-assign]

    # moto finds the message to delete by asking every message in the queue whether it ever had
    # the receipt handle, three times over: a burst of 10,000 messages makes each delete cost
    # 30,000 list scans. The handle index finds it at once; membership is an identity check.
    def indexed_delete(self: Any, receipt_handle: str) -> Any:
        if receipt_handle in self.deleted_messages:
            return None  # deleting again is fine, as on SQS
        message = _RECEIPTS.get(receipt_handle)
        try:
            if message is None:
                raise ValueError(receipt_handle)
            position = operator.indexOf(self._messages, message)
        except ValueError:
            raise sqs_models.ReceiptHandleIsInvalid() from None  # type: ignore[attr-defined]
        del self._messages[position]
        self.pending_messages.discard(message)
        self.deleted_messages.update(message.all_receipt_handles)
        for handle in message.all_receipt_handles:
            _RECEIPTS.pop(handle, None)
        return message

    sqs_models.Queue.delete_message = indexed_delete  # type: ignore[method-assign]

    # A queue's visible messages: moto reads the clock twice per message; once per call is the
    # same answer (visible: now > visible_at; not delayed: now >= delayed_until).
    def visible_messages(self: Any) -> list[Any]:
        now = sqs_models.unix_time_millis()  # type: ignore[attr-defined]
        return [m for m in self._messages if now > m.visible_at and now >= m.delayed_until]

    sqs_models.Queue.messages = property(visible_messages)  # type: ignore[method-assign,assignment]

    # Every SendMessage reads the queue's attributes for one flag (ContentBasedDeduplication),
    # and the attributes include three message counts, each a pass over the whole queue with
    # two clock reads per message: a burst of 10,000 sends costs 10,000 x 30,000 checks. While
    # a message is sent the counts are not computed (nothing in a send reads them); otherwise
    # they are counted with one clock read per call, as moto defines them.
    sending = threading.local()

    def counting(kind: str) -> Any:
        def count(self: Any) -> int:
            if getattr(sending, "active", False):
                return 0
            now = sqs_models.unix_time_millis()  # type: ignore[attr-defined]
            if kind == "delayed":
                return sum(1 for m in self._messages if now < m.delayed_until)
            if kind == "not_visible":
                return sum(1 for m in self._messages if now <= m.visible_at)
            return sum(1 for m in self._messages if now > m.visible_at and now >= m.delayed_until)

        return property(count)

    queue_class: Any = sqs_models.Queue
    queue_class.approximate_number_of_messages_delayed = counting("delayed")
    queue_class.approximate_number_of_messages_not_visible = counting("not_visible")
    queue_class.approximate_number_of_messages = counting("visible")

    send_message = sqs_models.SQSBackend.send_message

    def send_without_counting(self: Any, *args: Any, **kwargs: Any) -> Any:
        sending.active = True
        try:
            return send_message(self, *args, **kwargs)
        finally:
            sending.active = False

    sqs_models.SQSBackend.send_message = send_without_counting  # type: ignore[method-assign]

    # receive_message deep-copies each message it returns (to filter its attributes on the copy,
    # which it does by replacing the dict). A copy of the message object, with its own lists and
    # dicts, leaves the stored message just as untouched.
    def copy_for_receive(value: Any, memo: Any = None) -> Any:
        if isinstance(value, sqs_models.Message):
            clone = copy.copy(value)
            clone.message_attributes = dict(value.message_attributes)
            clone.system_attributes = dict(value.system_attributes)
            clone._old_receipt_handles = list(value._old_receipt_handles)
            return clone
        return copy.deepcopy(value, memo)

    sqs_models.deepcopy = copy_for_receive  # type: ignore[attr-defined,assignment]


# --------------------------------------------------------------------------- the message ledger
_ledger: list[Any] = [None]


def track_messages(ledger: Any) -> None:
    """Report every message SQS accepts, moves, deletes or purges to ``ledger`` (``None``: stop).

    ``ledger`` has ``added(queue, message_id, body)``, ``deleted(queue, message_id)`` and
    ``purged(queue, message_ids)``; a message added again under the same id is a move to a
    dead-letter queue (moto moves the message object itself).
    """
    _ledger[0] = ledger


def _patch_sqs_ledger() -> None:
    from moto.sqs.models import Queue, SQSBackend

    add_message, delete_message = Queue.add_message, Queue.delete_message
    purge_queue, delete_queue = SQSBackend.purge_queue, SQSBackend.delete_queue

    def tracked_add(self: Any, message: Any) -> None:
        add_message(self, message)
        ledger = _ledger[0]
        if ledger is not None and self._messages and self._messages[-1] is message:
            ledger.added(self.name, message.id, message.body)

    def tracked_delete(self: Any, receipt_handle: str) -> Any:
        deleted = delete_message(self, receipt_handle)  # the indexed delete: the message, or None
        ledger = _ledger[0]
        if ledger is not None and deleted is not None:
            ledger.deleted(self.name, deleted.id)
        return deleted

    def tracked_purge(self: Any, queue_name: str) -> None:
        ledger = _ledger[0]
        ids = [m.id for m in self.get_queue(queue_name)._messages] if ledger is not None else []
        purge_queue(self, queue_name)
        if ledger is not None:
            ledger.purged(queue_name, ids)

    def tracked_delete_queue(self: Any, queue_name: str) -> None:
        ledger = _ledger[0]
        ids = [m.id for m in self.get_queue(queue_name)._messages] if ledger is not None else []
        delete_queue(self, queue_name)
        if ledger is not None:
            ledger.purged(queue_name, ids)

    Queue.add_message = tracked_add  # type: ignore[method-assign]
    Queue.delete_message = tracked_delete  # type: ignore[method-assign]
    SQSBackend.purge_queue = tracked_purge  # type: ignore[method-assign]
    SQSBackend.delete_queue = tracked_delete_queue  # type: ignore[method-assign]


def _rule_may_match(rule: Any, detail_types: set[str], sources: set[str]) -> bool:
    """False only when the rule's pattern lists plain detail-types or sources none of the events has."""
    pattern = rule.event_pattern.get_pattern() or {}
    for key, present in (("detail-type", detail_types), ("source", sources)):
        wanted = pattern.get(key)
        plain = isinstance(wanted, list) and bool(wanted) and all(isinstance(w, str) for w in wanted)
        if plain and not present.intersection(wanted or ()):
            return False
    return True


def _patch_event_routing() -> None:
    """Two changes to moto's event routing:

    - AWS semantics: a DISABLED rule matches nothing (moto routes to it anyway). Pausing an
      event-triggered task disables its rule.
    - Speed: moto builds each event again (a deep copy and a JSON parse) for every rule on the
      bus, and only then matches. Rules that list plain ``detail-type``/``source`` values none of
      the events have are set aside for the call; every other rule is matched by moto as before."""
    from collections import OrderedDict

    from moto.events.models import EventsBackend

    original = EventsBackend.put_events

    def put_events(self: Any, events: list[dict[str, Any]]) -> Any:
        detail_types = {str(e.get("DetailType")) for e in events}
        sources = {str(e.get("Source")) for e in events}
        swapped = []
        for name in {self._normalize_event_bus_arn(e.get("EventBusName")) for e in events}:
            try:
                bus = self.describe_event_bus(name)
            except Exception:
                continue  # moto reports the unknown bus itself
            keep = OrderedDict(
                (k, r)
                for k, r in bus.rules.items()
                if r.state != "DISABLED" and _rule_may_match(r, detail_types, sources)
            )
            swapped.append((bus, bus.rules))
            bus.rules = keep
        try:
            return original(self, events)
        finally:
            for bus, rules in swapped:
                bus.rules = rules

    EventsBackend.put_events = put_events  # type: ignore[method-assign]
