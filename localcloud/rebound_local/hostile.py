"""Faults injected inside moto, so that every client of the stand-in meets them.

They act on moto's backends (and, for throttling, on its request handling), not on a client, so
the runtime's handlers on every transport (``direct``, ``inproc``, ``http``) and any outside
client of ``rebound local up`` see the same cloud. ``activate(MotoFaults(...))`` turns them on for
the process, ``activate(None)`` off; with none active every patch passes straight through.
Each draw comes from a random generator of its own, seeded from the scenario's seed.

1. **Transaction conflicts** (``transaction_conflict: p``). DynamoDB cancels a transaction that
   meets another one on the same item, and fails a single conditional write that meets a
   transaction. With probability p, before anything is checked or written, a
   ``TransactWriteItems`` is cancelled with ``TransactionCanceledException`` whose
   ``CancellationReasons`` name ``TransactionConflict`` for one item (``None`` for the others),
   and a ``PutItem``, ``UpdateItem`` or ``DeleteItem`` with a ``ConditionExpression`` fails with
   ``TransactionConflictException``.
2. **Index lag** (``index_lag: s``). Global secondary indexes are eventually consistent: a
   ``Query`` with ``IndexName`` sees the table as it was ``s`` seconds of clock time ago: an item
   written since is not there, an item updated since has its old values, an item deleted since is
   still there. Each table with indexes keeps the last ``s`` seconds of writes (the item as it
   was before each one); base-table reads, ``BatchGetItem`` and transactions are unaffected.
3. **Latest receipt handle only** (``receipt_handles: latest_only``). SQS promises only that a
   message's most recent receipt handle acts on it: ``DeleteMessage`` with an older handle
   succeeds without deleting anything, and ``ChangeMessageVisibility`` with one fails with
   ``InvalidParameterValue`` ("Message does not exist or is not available for visibility timeout
   change"). Without it, the last few handles of a message stay valid (``motopatch``).
4. **Throttling in moto's request handling** (``rebound local up --faults``): a share of
   requests per ``service:Operation`` is answered with a throttling error before moto acts, for
   any client over HTTP or in-process. The simulator throttles the runtime's own calls on the
   client side instead (``instrument.Throttler``), so no call is throttled twice.

What was injected is counted on the ``MotoFaults`` object (``snapshot()``).
"""

from __future__ import annotations

import copy
import random
import threading
from collections import Counter, deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rebound_local import motopatch
from rebound_local.instrument import THROTTLE_CODES, Throttler

CONFLICT_REASON = ("TransactionConflict", "Transaction is ongoing for the item", None)
STALE_VISIBILITY = (
    "Value {handle} for parameter ReceiptHandle is invalid. Reason: Message does not exist or is not "
    "available for visibility timeout change."
)
_SCALARS = frozenset({"S", "N", "B", "BOOL", "NULL"})
_HISTORY = "_rebound_history"
_installed = [False]


@dataclass
class MotoFaults:
    transaction_conflict: float = 0.0
    index_lag_s: float = 0.0
    latest_receipt_only: bool = False
    throttle: Mapping[str, float] = field(default_factory=dict)
    """Server-side throttling, per ``service:Operation`` (``rebound local up --faults``)."""
    seed: int = 0
    conflicts: Counter[str] = field(default_factory=Counter)
    stale_receipts: Counter[str] = field(default_factory=Counter)
    lagged_queries: int = 0

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._conflict_rng = random.Random(f"{self.seed}:transaction_conflict")
        self.throttler = Throttler(self.throttle, seed=self.seed)

    @property
    def any(self) -> bool:
        return bool(
            self.transaction_conflict > 0
            or self.index_lag_s > 0
            or self.latest_receipt_only
            or any(rate > 0 for rate in self.throttle.values())
        )

    def conflict(self, key: str, items: int = 1) -> int | None:
        """Whether this write meets a conflict: the index of the item that does, or None."""
        if self.transaction_conflict <= 0:
            return None
        with self._lock:
            if self._conflict_rng.random() >= self.transaction_conflict:
                return None
            self.conflicts[key] += 1
            return self._conflict_rng.randrange(items)

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {
                "transaction_conflicts": dict(self.conflicts),
                "index_lag_s": self.index_lag_s,
                "lagged_index_queries": self.lagged_queries,
                "stale_receipt_handles": dict(self.stale_receipts),
                "server_throttled": dict(self.throttler.injected),
            }

    def describe(self) -> list[str]:
        """One line per active fault, for banners."""
        lines = []
        if self.transaction_conflict > 0:
            share = f"{self.transaction_conflict:g}"
            lines.append(f"transaction conflicts: {share} of transactions and conditional writes")
        if self.index_lag_s > 0:
            lines.append(f"index lag: GSI queries see the table as it was {self.index_lag_s:g} s ago")
        if self.latest_receipt_only:
            lines.append("receipt handles: only a message's latest handle deletes it or changes visibility")
        for key, rate in sorted(self.throttle.items()):
            if rate > 0:
                lines.append(f"throttling: {rate:g} of {key} requests")
        return lines


_active: list[MotoFaults | None] = [None]


def activate(faults: MotoFaults | None) -> None:
    """Turn these faults on for every client of the stand-in (``None``: off)."""
    install()
    _active[0] = faults if faults is not None and faults.any else None


def active() -> MotoFaults | None:
    return _active[0]


def install() -> None:
    """Apply the patches once per process (they pass through while no faults are active)."""
    with motopatch.LOCK:
        if _installed[0]:
            return
        _patch_conflicts()
        _patch_index_lag()
        _patch_receipts()
        _patch_throttling()
        _installed[0] = True


# --------------------------------------------------------------------------- 1. conflicts
def _patch_conflicts() -> None:
    from moto.dynamodb.exceptions import DynamodbException, TransactionCanceledException
    from moto.dynamodb.models import DynamoDBBackend

    class TransactionConflictException(DynamodbException):
        error_type = "com.amazonaws.dynamodb.v20120810#TransactionConflictException"

        def __init__(self) -> None:
            super().__init__(
                self.error_type,
                message="Operation was rejected because there is an ongoing transaction for the item.",
            )

    transact = DynamoDBBackend.transact_write_items
    put_item, update_item, delete_item = (
        DynamoDBBackend.put_item,
        DynamoDBBackend.update_item,
        DynamoDBBackend.delete_item,
    )

    def conflicting_transact(self: Any, transact_items: list[dict[str, Any]]) -> Any:
        faults = _active[0]
        if faults is not None and transact_items:
            index = faults.conflict("dynamodb:TransactWriteItems", len(transact_items))
            if index is not None:
                reasons: list[Any] = [(None, None, None)] * len(transact_items)
                reasons[index] = CONFLICT_REASON
                raise TransactionCanceledException(reasons)
        return transact(self, transact_items)

    def check(operation: str, conditional: Any) -> None:
        faults = _active[0]
        if faults is not None and conditional and faults.conflict(f"dynamodb:{operation}") is not None:
            raise TransactionConflictException()

    def conflicting_put(
        self: Any,
        table_name: str,
        item_attrs: dict[str, Any],
        expected: Any = None,
        condition_expression: str | None = None,
        *args: Any,
        **kwargs: Any,
    ) -> Any:
        check("PutItem", condition_expression or expected)
        return put_item(self, table_name, item_attrs, expected, condition_expression, *args, **kwargs)

    def conflicting_update(
        self: Any,
        table_name: str,
        key: dict[str, Any],
        update_expression: str,
        expression_attribute_names: Any,
        expression_attribute_values: Any,
        attribute_updates: Any = None,
        expected: Any = None,
        condition_expression: str | None = None,
        *args: Any,
        **kwargs: Any,
    ) -> Any:
        check("UpdateItem", condition_expression or expected)
        return update_item(
            self,
            table_name,
            key,
            update_expression,
            expression_attribute_names,
            expression_attribute_values,
            attribute_updates,
            expected,
            condition_expression,
            *args,
            **kwargs,
        )

    def conflicting_delete(
        self: Any,
        table_name: str,
        key: dict[str, Any],
        expression_attribute_names: Any = None,
        expression_attribute_values: Any = None,
        condition_expression: str | None = None,
        *args: Any,
        **kwargs: Any,
    ) -> Any:
        check("DeleteItem", condition_expression)
        return delete_item(
            self,
            table_name,
            key,
            expression_attribute_names,
            expression_attribute_values,
            condition_expression,
            *args,
            **kwargs,
        )

    DynamoDBBackend.transact_write_items = conflicting_transact  # type: ignore[method-assign]
    DynamoDBBackend.put_item = conflicting_put  # type: ignore[method-assign]
    DynamoDBBackend.update_item = conflicting_update  # type: ignore[method-assign]
    DynamoDBBackend.delete_item = conflicting_delete  # type: ignore[method-assign]


# --------------------------------------------------------------------------- 2. index lag
def _lag() -> float:
    faults = _active[0]
    return faults.index_lag_s if faults is not None else 0.0


def _snapshot(item: Any) -> Any:
    """A copy of an item that later in-place updates of the stored one cannot reach."""
    if item is None:
        return None
    from moto.dynamodb.models.dynamo_type import Item, LimitedSizeDict

    clone: Any = Item.__new__(Item)
    clone.hash_key = item.hash_key
    clone.range_key = item.range_key
    clone.attrs = LimitedSizeDict()
    dict.update(
        clone.attrs,
        {
            name: copy.copy(value) if value.type in _SCALARS else copy.deepcopy(value)
            for name, value in item.attrs.items()
        },
    )
    return clone


def _remember(table: Any, pk: Any, before: Any) -> None:
    """Keep the item as it was before this write, for index queries that lag behind."""
    history: deque[tuple[float, Any, Any]] | None = table.__dict__.get(_HISTORY)
    if history is None:
        history = table.__dict__[_HISTORY] = deque()
    now = motopatch._unix_time()
    history.append((now, pk, before))
    _trim(history, now - _lag())


def _trim(history: deque[tuple[float, Any, Any]], cutoff: float) -> None:
    while history and history[0][0] <= cutoff:
        history.popleft()


def _lagged_view(table: Any, index_name: str, value: Any, candidates: list[Any]) -> list[Any]:
    """What an index query sees: the partition's items as they were ``index_lag`` ago."""
    lag = _lag()
    history: deque[tuple[float, Any, Any]] | None = table.__dict__.get(_HISTORY)
    if lag <= 0 or not history:
        return candidates
    _trim(history, motopatch._unix_time() - lag)
    if not history:
        return candidates
    then: dict[Any, Any] = {}
    for _, pk, before in history:
        then.setdefault(pk, before)  # the earliest write since the cutoff holds the old item
    attr = motopatch._index_of(table).attrs[index_name]
    seen = [item for item in candidates if (item.hash_key, item.range_key) not in then]
    seen += [before for before in then.values() if before is not None and before.attrs.get(attr) == value]
    faults = _active[0]
    changed = len(seen) != len(candidates) or any((i.hash_key, i.range_key) in then for i in candidates)
    if faults is not None and changed:
        with faults._lock:
            faults.lagged_queries += 1
    return seen


def _patch_index_lag() -> None:
    from moto.dynamodb.models import DynamoDBBackend
    from moto.dynamodb.models.table import Table

    put_item, delete_item, update_item = Table.put_item, Table.delete_item, DynamoDBBackend.update_item

    def remembering_put(self: Any, item_attrs: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        if _lag() <= 0 or not self.global_indexes:
            return put_item(self, item_attrs, *args, **kwargs)
        try:
            key = motopatch._key_values(self, item_attrs)
        except KeyError:  # moto reports the missing key itself
            return put_item(self, item_attrs, *args, **kwargs)
        before = self.get_item(*key)
        item = put_item(self, item_attrs, *args, **kwargs)
        _remember(self, key, before)  # a put replaces the stored object: the old one stays as it was
        return item

    def remembering_delete(self: Any, hash_key: Any, range_key: Any = None) -> Any:
        item = delete_item(self, hash_key, range_key)
        if item is not None and _lag() > 0 and self.global_indexes:
            _remember(self, (item.hash_key, item.range_key), item)
        return item

    def remembering_update(self: Any, table_name: str, key: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        table = self.get_table(table_name)
        if _lag() <= 0 or not table.global_indexes:
            return update_item(self, table_name, key, *args, **kwargs)
        pk = motopatch._key_values(table, key)
        before = _snapshot(table.get_item(*pk))  # moto updates the stored item in place
        item = update_item(self, table_name, key, *args, **kwargs)
        _remember(table, pk, before)
        return item

    Table.put_item = remembering_put  # type: ignore[method-assign]
    Table.delete_item = remembering_delete  # type: ignore[method-assign]
    DynamoDBBackend.update_item = remembering_update  # type: ignore[method-assign]
    motopatch.INDEX_VIEW[0] = _lagged_view


# --------------------------------------------------------------------------- 3. receipt handles
def _patch_receipts() -> None:
    import moto.sqs.models as sqs_models
    from moto.sqs.exceptions import InvalidParameterValue

    delete_message = sqs_models.Queue.delete_message
    change_visibility = sqs_models.SQSBackend.change_message_visibility

    def stale(receipt_handle: str) -> Any:
        """The message an older receipt handle belongs to, when only the latest one counts."""
        faults = _active[0]
        if faults is None or not faults.latest_receipt_only:
            return None
        message = motopatch._RECEIPTS.get(receipt_handle)
        if message is None or message.receipt_handle == receipt_handle:
            return None
        return message

    def latest_only_delete(self: Any, receipt_handle: str) -> Any:
        if receipt_handle not in self.deleted_messages and stale(receipt_handle) is not None:
            _count_stale("sqs:DeleteMessage")
            return None  # SQS: the request succeeds, and the message stays
        return delete_message(self, receipt_handle)

    def latest_only_visibility(
        self: Any, queue_name: str, receipt_handle: str, visibility_timeout: int
    ) -> None:
        if stale(receipt_handle) is not None:
            _count_stale("sqs:ChangeMessageVisibility")
            raise InvalidParameterValue(STALE_VISIBILITY.format(handle=receipt_handle))
        change_visibility(self, queue_name, receipt_handle, visibility_timeout)

    sqs_models.Queue.delete_message = latest_only_delete  # type: ignore[method-assign]
    sqs_models.SQSBackend.change_message_visibility = latest_only_visibility  # type: ignore[method-assign]


def _count_stale(key: str) -> None:
    faults = _active[0]
    if faults is not None:
        with faults._lock:
            faults.stale_receipts[key] += 1


# --------------------------------------------------------------------------- 4. throttling
def _patch_throttling() -> None:
    from moto.core.exceptions import ServiceException
    from moto.core.responses import ActionResult, BaseResponse

    class Throttled(ServiceException):
        code = "ThrottlingException"
        message = "Rate exceeded (injected by the local cloud)"

    call_action = BaseResponse.call_action

    def throttled_call_action(self: Any) -> Any:
        faults = _active[0]
        if faults is not None and faults.throttle:
            service = str(self.service_name or "")
            try:
                operation = self._get_action()
            except Exception:
                operation = ""
            if operation and faults.throttler.hit(f"{service}:{operation}"):
                error = Throttled(THROTTLE_CODES.get(service, "ThrottlingException"), Throttled.message)
                status, headers, body = self.serialized(ActionResult(error))
                return (400 if status < 400 else status), headers, body
        return call_action(self)

    BaseResponse.call_action = throttled_call_action  # type: ignore[method-assign]
