"""Item reads answered as DynamoDB's own JSON, skipping botocore's walk of the output shape.

botocore parses every answer by walking the operation's output shape value by value; for a page of
a thousand audit records that walk cost more than everything else ``audit verify --all`` did with
the page (a known cost: boto/boto3#2928, boto/botocore#3238, with no option to turn it off). An
item read's answer is already the items in DynamoDB's JSON (``{type: value}`` per attribute,
numbers as text), which is what the walk returns too, but for binary values (base64 text here,
bytes from botocore; ``codec.from_item`` reads both).

``install(client)`` registers a ``before-parse`` handler on the client that, inside ``raw()`` in
the same thread only, hands a successful answer's JSON to botocore as its parsed result and an
empty body to its parser (which then adds only the response metadata). Every other call, every
error answer, and every call of other threads is parsed by botocore as before.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

OPERATIONS = ("Scan", "Query", "BatchGetItem", "GetItem")
_HANDLER_ID = "rebound-raw-item-answers"
_ON = threading.local()


def _answer_raw(response_dict: dict[str, Any], customized_response_dict: dict[str, Any], **_: Any) -> None:
    if not getattr(_ON, "raw", False) or response_dict.get("status_code") != 200:
        return
    body = response_dict.get("body")
    if not body:
        return
    customized_response_dict.update(json.loads(body))
    response_dict["body"] = b"{}"


def install(client: Any) -> None:
    """Register the handler on ``client`` (registering it again changes nothing)."""
    for operation in OPERATIONS:
        client.meta.events.register(
            f"before-parse.dynamodb.{operation}", _answer_raw, unique_id=f"{_HANDLER_ID}-{operation}"
        )


@contextmanager
def raw() -> Iterator[None]:
    """Item reads of this thread, on an installed client, answer raw while inside."""
    before = getattr(_ON, "raw", False)
    _ON.raw = True
    try:
        yield
    finally:
        _ON.raw = before
