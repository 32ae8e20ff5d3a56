"""Patch 3, transactions: ``TransactWriteItems`` checks every condition, then writes.

moto backs up every table touched by ``TransactWriteItems`` with a deep copy (cost grows with
table size) and leaves stream records of rolled-back writes behind. The replacement checks every
condition first and writes only if all pass, as DynamoDB does. Also owns ``_key_values``, a
table's key as moto's ``DynamoType`` values.
"""

from __future__ import annotations

import copy
from typing import Any


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
        plans: list[tuple[str, dict[str, Any], str, dict[str, Any], Any]] = []
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
            marker = (str(table_name), _key_marker(key))
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
            plans.append((op_type, op, table_name, key, current))
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
            for op_type, op, table_name, key, before in plans:
                if op_type == "ConditionCheck":
                    continue
                # ``before`` is the item the condition saw: under the lock, and with no two
                # operations on one item, nothing has written it since.
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


def _key_marker(key: dict[str, Any]) -> Any:
    """What tells two operations on one item apart: each key attribute's name, type and value (a
    key's values are scalars); a value that cannot be hashed, by its text as moto's own check had
    it."""
    try:
        return tuple(
            sorted((name, kind, value) for name, typed in key.items() for kind, value in typed.items())
        )
    except (TypeError, AttributeError):  # not a scalar, or not an attribute value at all
        return str(dict(sorted(key.items())))


def _key_values(table: Any, key: dict[str, Any]) -> tuple[Any, Any]:
    from moto.dynamodb.models.dynamo_type import DynamoType

    hash_value = DynamoType(key[table.hash_key_attr])
    range_value = DynamoType(key[table.range_key_attr]) if table.range_key_attr else None
    return hash_value, range_value
