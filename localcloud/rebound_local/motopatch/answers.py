"""Patch 11, DynamoDB's item answers as JSON: reads answer in one ``json.dumps``.

moto serialises every answer by walking the operation's output shape value by value (an attribute
picker per member, per attribute of every item), which made a 100-item ``Scan`` or
``BatchGetItem`` page cost about as much server time as everything else in a bulk ``tasks
apply`` or ``audit verify --all`` put together. For the item reads (``GetItem``, ``Query``,
``Scan``, ``BatchGetItem``) the answer moto builds is already DynamoDB's JSON (``{type: value}``
per attribute, numbers as text): the only values the shape walk changes are binary attributes
(base64) and timestamps (epoch seconds), and it leaves out members that are None. This encodes
exactly that in one pass; every other answer, and every error, goes through moto's serialiser.
``tests/integration/test_motopatch.py`` checks both give the same answer.
"""

from __future__ import annotations

import base64
import json
from datetime import datetime
from typing import Any

FAST = frozenset({"GetItem", "Query", "Scan", "BatchGetItem"})
CONTENT_TYPE = "application/x-amz-json-1.0"


def _plain(value: Any) -> Any:
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(value).decode()
    if isinstance(value, datetime):
        return value.timestamp()
    raise TypeError(f"not JSON: {type(value).__name__}")


def encode(result: dict[str, Any]) -> str:
    """The answer's body: ``result`` without its None members, binary as base64."""
    return json.dumps({k: v for k, v in result.items() if v is not None}, default=_plain)


def _patch_answers() -> None:
    import moto.dynamodb.responses as ddb

    generic = ddb.DynamoHandler.serialized

    def serialized(self: Any, action_result: Any) -> Any:
        result = action_result.result
        if (
            type(action_result) is ddb.DynamoResult
            and isinstance(result, dict)
            and self._get_action() in FAST
        ):
            headers = {"Content-Type": CONTENT_TYPE, **self.response_headers}
            return 200, headers, encode(result)
        return generic(self, action_result)

    ddb.DynamoHandler.serialized = serialized  # type: ignore[method-assign]
