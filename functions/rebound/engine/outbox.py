"""Relay outbox records (from the outbox table's DynamoDB stream) to the event bus.

Only ``INSERT`` records are events; the TTL's deletions are ignored. Delivery is at least once:
a record whose event EventBridge refused is reported as a batch item failure and retried from
there, so consumers must be (and are) idempotent.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from rebound.adapters.bus import Bus, BusEvent
from rebound.adapters.dynamo import from_item


def stream_events(records: Iterable[Mapping[str, Any]]) -> list[BusEvent]:
    events: list[BusEvent] = []
    for record in records:
        if record.get("eventName") != "INSERT":
            continue
        image = from_item(record["dynamodb"]["NewImage"])
        events.append(
            BusEvent(
                key=str(record["dynamodb"]["SequenceNumber"]),
                source=str(image["source"]),
                detail_type=str(image["detail_type"]),
                detail=str(image["detail"]),
            )
        )
    return events


def relay(records: Sequence[Mapping[str, Any]], bus: Bus) -> list[str]:
    """Publish the stream batch; returns the sequence numbers to retry from (the earliest failure)."""
    events = stream_events(records)
    failed = set(bus.publish(events))
    if not failed:
        return []
    ordered = [str(r["dynamodb"]["SequenceNumber"]) for r in records]
    first = min(ordered.index(key) for key in failed)
    return [ordered[first]]
