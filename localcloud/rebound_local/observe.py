"""Read the local cloud's state straight from moto's backends: fast, and without API calls.

A boto3 ``Scan`` of 30,000 runs takes about 30 s through moto's response layer; reading the same
items from the backend takes well under a second. The live view, the simulator's report and its
invariants read here. Every read holds ``motopatch.LOCK``, so it sees one consistent moment.
"""

from __future__ import annotations

import base64
import json
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from rebound import resources as r
from rebound.adapters.dynamo import DOC, from_item
from rebound.adapters.dynamo.codec import pack_doc, unpack_doc
from rebound.domain.jsonutil import plain_loads
from rebound.settings import Settings
from rebound_local import motopatch
from rebound_local.cloud import LocalCloud

_SIMPLE = frozenset({"S", "N"})


def _number(text: str) -> int | float:
    try:
        return int(text)
    except ValueError:
        return float(text)


def stored_doc(value: Any) -> str:
    """The JSON text of a moto ``doc`` attribute: text, or deflated binary (moto keeps binary as
    the bytes the direct transport handed it, or as the base64 text of the HTTP request)."""
    if value.type == "B":
        raw = value.value
        return unpack_doc(raw if isinstance(raw, bytes) else base64.b64decode(raw))
    return str(value.value)


def write_doc(item: Any, doc: dict[str, Any]) -> None:
    """Store ``doc`` into a moto item as the codec would (a tamperer's or a bad write's edit)."""
    from moto.dynamodb.models.dynamo_type import DynamoType

    packed = pack_doc(json.dumps(doc))
    if isinstance(packed, bytes):
        item.attrs[DOC] = DynamoType({"B": packed})
    else:
        item.attrs[DOC] = DynamoType({"S": packed})


def decode_item(item: Any, loads: Callable[[str], Any] = json.loads) -> dict[str, Any]:
    """A moto ``Item`` as the plain dict ``rebound.adapters.dynamo.from_item`` would return, its
    document read with ``loads``."""
    attrs = item.attrs
    if all(value.type in _SIMPLE or name == DOC for name, value in attrs.items()):
        out: dict[str, Any] = {}
        doc = None
        for name, value in attrs.items():
            if name == DOC:
                doc = stored_doc(value)
            elif value.type == "S":
                out[name] = value.value
            else:
                out[name] = _number(value.value)
        if doc is not None:
            out.update(loads(doc))
        return out
    return from_item(item.to_json()["Attributes"])


def _table(cloud: LocalCloud, name: str) -> Any:
    return cloud.dynamodb_backend().get_table(name)


def iter_items(table: Any) -> Iterator[Any]:
    """Every ``Item`` of a moto table (with or without a sort key)."""
    if table.range_key_attr is None:
        yield from table.items.values()
    else:
        for by_range in table.items.values():
            yield from by_range.values()


def stored_bytes(cloud: LocalCloud, settings: Settings, overhead: int) -> dict[str, int]:
    """What each table and each of its indexes stores, as DynamoDB bills storage: every item's
    size plus ``overhead``; an index entry the projected item (the whole item, or its keys and the
    index's alone), plus ``overhead``, for each item that has the index's keys. Keyed ``<table>``
    and ``<table>.<index>``."""
    from rebound_local.bill_units import item_size

    out: dict[str, int] = {}
    with motopatch.LOCK:
        for spec in r.SPEC.tables:
            table = _table(cloud, settings.table(spec.logical))
            items = [item.to_json()["Attributes"] for item in iter_items(table)]
            sizes = [item_size(i) + overhead for i in items]
            out[spec.logical] = sum(sizes)
            table_keys = [spec.partition.name] + ([spec.sort.name] if spec.sort else [])
            for index in spec.indexes:
                keys = [index.partition.name] + ([index.sort.name] if index.sort else [])
                whole = index.projection == "ALL"
                out[f"{spec.logical}.{index.name}"] = sum(
                    size if whole else item_size(_keys(item, table_keys + keys)) + overhead
                    for item, size in zip(items, sizes, strict=True)
                    if all(k in item for k in keys)
                )
    return out


def archived_bytes(cloud: LocalCloud, settings: Settings) -> int:
    """What the audit archive holds: the bytes of every object (gzip of JSON Lines) in its bucket."""
    if not settings.archive_bucket:
        return 0
    pages = cloud.client("s3").get_paginator("list_objects_v2").paginate(Bucket=settings.archive_bucket)
    return sum(int(item["Size"]) for page in pages for item in page.get("Contents", []))


def _keys(item: dict[str, Any], names: list[str]) -> dict[str, Any]:
    return {k: item[k] for k in dict.fromkeys(names)}


def table_items(cloud: LocalCloud, name: str) -> list[dict[str, Any]]:
    with motopatch.LOCK:
        return [decode_item(item) for item in iter_items(_table(cloud, name))]


def audit_chains(cloud: LocalCloud, settings: Settings) -> dict[str, list[dict[str, Any]]]:
    """Every audit record, grouped by subject, in sequence order, as stored: integral numbers
    read as ints (``jsonutil.plain_loads``), the form a record's hash is made over, so a chain is
    checked without a model of each record (``audit.verify_fields``)."""
    with motopatch.LOCK:
        table = _table(cloud, settings.table("audit"))
        out: dict[str, list[dict[str, Any]]] = {}
        for by_range in table.items.values():
            records = [decode_item(item, plain_loads) for item in by_range.values()]
            if records:
                records.sort(key=lambda rec: int(rec["seq"]))
                out[str(records[0]["subject"])] = records
        return out


def topic_notices(cloud: LocalCloud, topic_arn: str | None) -> list[tuple[str, str]]:
    """What the alerts topic received about work orders, in order: (work order id, ``resolved``
    for a resolved notice, else ``opened``), from each message's attributes."""
    if not topic_arn:
        return []
    with motopatch.LOCK:
        topic = cloud.sns_backend().topics.get(topic_arn)
        sent = list(topic.sent_notifications) if topic is not None else []
    out: list[tuple[str, str]] = []
    for _message_id, _message, _subject, attributes, _group in sent:
        attributes = attributes or {}
        order = attributes.get("work_order_id", {}).get("Value")
        if order:
            state = attributes.get("state", {}).get("Value") or "opened"
            out.append((str(order), str(state)))
    return out


def count_by_index(cloud: LocalCloud, table_name: str, index: str) -> dict[str, int]:
    """Items per partition value of a GSI (e.g. runs per state), from the query index patch."""
    with motopatch.LOCK:
        partitions = motopatch._index_of(_table(cloud, table_name))
        buckets = partitions.buckets.get(index, {})
        return {str(value.value): len(keys) for value, keys in buckets.items() if keys}


def runs_by_state(cloud: LocalCloud, table_name: str) -> dict[str, int]:
    """Runs per state: the ``by_state`` index's counts, plus the runs it leaves out (a clean
    success, a clean attempt running: ``rebound.domain.run.in_state_index``), read from their
    items."""
    counts = count_by_index(cloud, table_name, "by_state")
    with motopatch.LOCK:
        unlisted = [item for item in iter_items(_table(cloud, table_name)) if "state" not in item.attrs]
        states = [str(decode_item(item).get("state") or "succeeded") for item in unlisted]
    for state in states:
        counts[state] = counts.get(state, 0) + 1
    return counts


@dataclass
class QueueDepth:
    name: str
    logical: str
    visible: int = 0
    in_flight: int = 0
    delayed: int = 0
    oldest_age_s: float | None = None
    is_dlq: bool = False

    @property
    def total(self) -> int:
        return self.visible + self.in_flight + self.delayed


def dead_letter_queue_names(cloud: LocalCloud) -> set[str]:
    """Queues that some queue's redrive policy targets, plus Rebound's declared DLQs."""
    names: set[str] = set()
    with motopatch.LOCK:
        for queue in cloud.sqs_backend().queues.values():
            if queue.dead_letter_queue is not None:
                names.add(queue.dead_letter_queue.name)
    return names


def queue_depths(cloud: LocalCloud, settings: Settings | None = None) -> list[QueueDepth]:
    logical = {ref.name: name for name, ref in (settings.queues.items() if settings else [])}
    declared_dlqs = {q.logical for q in r.SPEC.queues if q.logical.endswith("dlq")}
    dlqs = dead_letter_queue_names(cloud)
    out: list[QueueDepth] = []
    with motopatch.LOCK:
        now_ms = motopatch._unix_time_millis()
        for queue in cloud.sqs_backend().queues.values():
            depth = QueueDepth(
                queue.name,
                logical.get(queue.name, queue.name),
                is_dlq=queue.name in dlqs or logical.get(queue.name) in declared_dlqs,
            )
            oldest: float | None = None
            for message in queue._messages:
                if message.delayed_until > now_ms:
                    depth.delayed += 1
                elif message.visible_at > now_ms:
                    depth.in_flight += 1
                else:
                    depth.visible += 1
                sent = message.sent_timestamp or now_ms
                oldest = sent if oldest is None else min(oldest, sent)
            if oldest is not None:
                depth.oldest_age_s = max((now_ms - oldest) / 1000.0, 0.0)
            out.append(depth)
    return sorted(out, key=lambda d: (d.is_dlq, d.logical))


@dataclass
class ScheduleCounts:
    recurring: int = 0
    one_time: int = 0
    disabled: int = 0
    by_group: Counter[str] = field(default_factory=Counter)


def schedule_counts(cloud: LocalCloud) -> ScheduleCounts:
    counts = ScheduleCounts()
    with motopatch.LOCK:
        for group in cloud.scheduler_backend().schedule_groups.values():
            for schedule in group.schedules.values():
                counts.by_group[group.name] += 1
                if schedule.state != "ENABLED":
                    counts.disabled += 1
                elif str(schedule.schedule_expression).startswith("at("):
                    counts.one_time += 1
                else:
                    counts.recurring += 1
    return counts


def pending_stream_records(cloud: LocalCloud, settings: Settings) -> int:
    """Outbox stream records the relay's mapping has not delivered yet."""
    from rebound_local.streams import unconsumed

    with motopatch.LOCK:
        shard = _table(cloud, settings.table("outbox")).stream_shard
        return len(unconsumed(shard)) if shard is not None else 0
