"""Patch 7, parsing once: what moto computes again and again is computed once.

moto parses every condition expression on every write; the parsed tree is a pure function of the
expression, its names and its values, so it is cached. SQS turns attribute names into Python names
on every send and draws each receipt handle one character at a time; both are made cheap without
changing a result. The other repeated work of DynamoDB items and SQS queues (measuring, copying,
counting, finding a message by its receipt handle) is done once too. Owns the receipt handle index
(``_RECEIPTS``).
"""

from __future__ import annotations

import copy
import operator
import threading
import weakref
from typing import Any

KEPT_RECEIPT_HANDLES = 8
_RECEIPTS: weakref.WeakValueDictionary[str, Any] = weakref.WeakValueDictionary()
"""Receipt handle -> the message that has it (every handle moto still honours)."""
ITEM_SIZE_LIMIT = 405_000  # moto's figure for DynamoDB's 400 KB item limit
PARSED_KEPT = 8192
"""Parsed condition expressions kept; the cache starts again when full."""


def _patch_parsing() -> None:
    import functools

    import moto.dynamodb.models as ddb_models
    import moto.dynamodb.models.table as ddb_table
    import moto.sqs.models as sqs_models
    from moto.dynamodb.comparisons import get_filter_expression
    from moto.moto_api._internal import mock_random

    trees: dict[tuple[str | None, str, str], Any] = {}

    def cached_filter_expression(
        expr: str | None, names: dict[str, str] | None, values: dict[str, Any] | None
    ) -> Any:
        # The parse tree holds the expression's values; it never keeps state between evaluations.
        # Names and values are strings, numbers as strings, booleans, bytes, and lists and dicts
        # of them: their ``repr`` is equal only when they are (in another order it is a miss).
        key = (expr, repr(names), repr(values))
        tree = trees.get(key)
        if tree is None:  # parsed from copies: the caller's dicts are theirs to change later
            tree = get_filter_expression(expr, copy.deepcopy(names), copy.deepcopy(values))
            if len(trees) >= PARSED_KEPT:
                trees.clear()
            trees[key] = tree
        return tree

    ddb_models.get_filter_expression = cached_filter_expression  # type: ignore[attr-defined]
    ddb_table.get_filter_expression = cached_filter_expression  # type: ignore[attr-defined]

    # moto re-measures every attribute already set each time it sets one (quadratic in an
    # item's attributes, and the measuring encodes each string). Measure each once; the
    # 400 KB check is the same, as the size only grows while attributes are added.
    from moto.dynamodb.exceptions import ItemSizeTooLarge
    from moto.dynamodb.models.dynamo_type import DynamoType, Item, LimitedSizeDict

    from rebound_local.motopatch.dynamo_values import attrs_size

    def item_init(self: Any, hash_key: Any, range_key: Any, attrs: dict[str, Any]) -> None:
        self.hash_key = hash_key
        self.range_key = range_key
        values = {key: DynamoType(value) for key, value in attrs.items()}
        if attrs_size(values) > ITEM_SIZE_LIMIT:
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
    letter_of_byte = bytes(ord("a") + byte % 26 for byte in range(256))

    def generate_receipt_handle() -> str:
        # The same shape as moto's (185 lowercase letters), from one draw of 185 random bytes
        # (a draw per letter cost more than the rest of a receive).
        return mock_random.randbytes(185).translate(letter_of_byte).decode()

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

    # The one attribute a send reads (ContentBasedDeduplication, of a FIFO queue) is all that is
    # computed while a message is sent; moto computes every attribute, the redrive policy as JSON.
    moto_attributes = vars(sqs_models.Queue)["attributes"].fget

    def attributes(self: Any) -> dict[str, Any]:
        if not getattr(sending, "active", False):
            return moto_attributes(self)  # type: ignore[no-any-return]
        if not self.fifo_queue:
            return {}
        flag = self.content_based_deduplication
        return {"ContentBasedDeduplication": str(flag).lower() if isinstance(flag, bool) else flag}

    queue_class.attributes = property(attributes)

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
