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
        _state["installed"] = True


def _patch_clock() -> None:
    import moto.core.utils as utils

    utils.utcnow = _utcnow


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
                undo.append((table_name, key, copy.deepcopy(before)))
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
