"""Patch 13, plain scans answered in one pass: each item is measured once and encoded once.

For every item of a ``Scan`` page moto measures the item twice (the 1 MB page check, then the
running total; each measure encodes every string), copies it, and then walks the whole answer
(``dynamo_to_dict``) to turn each attribute value object into a plain ``{type: value}`` before
patch 11 writes the JSON. With ``rebound audit verify --all`` reading every audit record and run
in parallel segments, that was most of the local cloud's CPU (docs/performance.md). And every
page of every segment hashed the partition key of every partition it passed (md5) to find the
segment's partitions.

For a plain scan of a table (the request has no filter, projection, index, ``Select``,
``AttributesToGet`` or ``ReturnConsumedCapacity``; ``Limit``, ``ExclusiveStartKey``,
``ConsistentRead`` and valid ``Segment``/``TotalSegments`` are fine), this answers in one pass
over the items patch 12 hands moto's loop (the same items in the same order): each item's
size is taken once (strings and numbers measured as moto measures them, any other type by moto's
own ``size``) and its attributes turned into their answer form at the same time (strings and
numbers as they are, any other type by moto's own ``dynamo_to_dict``); the page stops where
moto's stops (``Limit`` items, or the next item would take it past 1 MB), with moto's
``Count``, ``ScannedCount`` and ``LastEvaluatedKey``. A partition key's segment byte (moto's md5
of its value) is remembered, as a pure function of the value. Every other scan, and a request
moto would refuse, goes through moto unchanged.

Nothing is kept between requests but the segment bytes: a later scan reads the items as they are
then, whatever wrote them (an API call, a transaction, or the simulator editing an item in
place). A cache of each item's answer form was not built: ``audit verify --all`` reads each item
once, so it would only make a second scan cheaper, and keeping it right would take catching
every write, the simulator's edits of moto's items included, which no moto method sees.
``tests/integration/test_motopatch.py`` checks the answers are byte for byte moto's, with items
added, updated in place, deleted, replaced and edited in place between pages.

Also here: moto searches every answer's body for an XML ``<RequestId>`` to fill in; a JSON body
(no such tag) is not searched (``_patch_request_id_search``).
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable
from typing import Any

Partitions = list[tuple[Any, Any]]
_KEY = operator.itemgetter(0)
_VALUE = operator.attrgetter("value")

PLAIN_SCAN = frozenset(
    {"TableName", "ConsistentRead", "Segment", "TotalSegments", "ExclusiveStartKey", "Limit"}
)
"""The request members a scan answered here may have; any other sends it through moto."""


@functools.lru_cache(maxsize=1 << 17)
def _segment_byte(value: Any) -> int:
    """The byte moto's ``Item.is_within_segment`` takes a partition's segment from (a value that
    is not text fails as it does there)."""
    from moto.utilities.utils import md5_hash

    return int(md5_hash(value.encode("utf8")).digest()[0])


def of_segment(segments: tuple[Any, Any]) -> Callable[[Partitions], Partitions]:
    """The ``(key, partition)`` pairs of the segment: moto's ``Item.is_within_segment`` of a
    partition's items, from the partition's key (the items' ``hash_key``), its md5 byte remembered
    per key value and looked up without a Python call per partition."""
    segment, total = segments
    if total is None:
        return lambda partitions: partitions

    def keep(partitions: Partitions) -> Partitions:
        bytes_of = map(_segment_byte, map(_VALUE, map(_KEY, partitions)))
        return [pair for pair, byte in zip(partitions, bytes_of, strict=True) if byte % total == segment]

    return keep


def _answer_form(item: Any, to_dict: Any) -> tuple[dict[str, Any], int]:
    """The item as moto's answer has it, and moto's ``Item.size`` of it, in one walk."""
    attrs: dict[str, Any] = {}
    size = 0
    for name, value in item.attrs.items():
        kind, raw = value.type, value.value
        size += len(name) if name.isascii() else len(name.encode("utf-8"))
        if kind == "S":
            size += len(raw) if raw.isascii() else len(raw.encode("utf-8"))
            attrs[name] = {"S": raw}
        elif kind == "N":
            size += len(str(raw))
            attrs[name] = {"N": raw}
        else:
            size += value.size()
            attrs[name] = to_dict(value)
    return attrs, size


def _plain_request(body: dict[str, Any]) -> bool:
    if not PLAIN_SCAN.issuperset(body):
        return False
    limit, segment, total = body.get("Limit"), body.get("Segment"), body.get("TotalSegments")
    if limit is not None and (type(limit) is not int or limit < 1):
        return False
    if (segment is None) != (total is None):
        return False
    return segment is None or (type(segment) is int and type(total) is int and 0 <= segment < total)


MOTO: dict[str, Any] = {}
"""moto's own ``DynamoHandler.scan`` (patch 12 beneath it), kept for the test that compares answers."""


def _patch_scan_answers() -> None:
    import moto.dynamodb.responses as ddb
    from moto.core.responses import ActionResult
    from moto.dynamodb.models.table import RESULT_SIZE_LIMIT
    from moto.dynamodb.models.utilities import dynamo_to_dict

    from rebound_local.motopatch import answers, table_scan

    moto_scan = ddb.DynamoHandler.scan
    MOTO["scan"] = moto_scan

    def scan(self: Any) -> Any:
        body = self.body
        tables = self.dynamodb_backend.tables
        if "Scan" not in answers.FAST or not _plain_request(body) or body["TableName"] not in tables:
            return moto_scan(self)
        table = tables[body["TableName"]]
        limit = body.get("Limit")
        segments = (body.get("Segment"), body.get("TotalSegments"))
        items: list[dict[str, Any]] = []
        last: Any = None
        total = 0
        for item in table_scan.items_from(
            table, body.get("ExclusiveStartKey"), segments, of_segment(segments)
        ):
            attrs, size = _answer_form(item, dynamo_to_dict)
            if len(items) == limit or total + size > RESULT_SIZE_LIMIT:
                key = {table.hash_key_attr: last.hash_key}
                if table.range_key_attr is not None and last.range_key is not None:
                    key[table.range_key_attr] = last.range_key
                return _result(ddb.DynamoResult, ActionResult, items, dynamo_to_dict(key))
            items.append(attrs)
            total += size
            last = item
        return _result(ddb.DynamoResult, ActionResult, items, None)

    ddb.DynamoHandler.scan = scan  # type: ignore[method-assign]
    _patch_request_id_search()


def _patch_request_id_search() -> None:
    """moto searches every answer's body with a regular expression for an XML ``<RequestId>`` to
    fill in (about 4 ms a megabyte); a text body without that tag has nothing to fill in, so the
    search is skipped for it. Any other body is searched as before."""
    from moto.core.responses import BaseResponse

    enrich = BaseResponse._enrich_response

    def enrich_response(headers: dict[str, str], body: Any) -> tuple[dict[str, str], Any]:
        if isinstance(body, str) and "<RequestId>" not in body:
            return enrich(headers, "")[0], body
        return enrich(headers, body)

    BaseResponse._enrich_response = staticmethod(enrich_response)  # type: ignore[method-assign]


def _result(result_type: Any, action_result: Any, items: list[dict[str, Any]], last_key: Any) -> Any:
    """moto's ``Scan`` result for ``items`` already in their answer form: a ``DynamoResult`` (so
    patch 11 encodes it) that is not walked again by ``dynamo_to_dict``."""
    result: dict[str, Any] = {"Count": len(items), "ScannedCount": len(items), "Items": items}
    if last_key is not None:
        result["LastEvaluatedKey"] = last_key
    answer = result_type.__new__(result_type)
    action_result.__init__(answer, result)
    return answer
