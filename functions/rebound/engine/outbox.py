"""Relay outbox events (read from the outbox table's stream) to the event bus.

Only inserts are events; the TTL's deletions are not (``rebound.adapters.streams.outbox_events``
decodes a batch). Delivery is at least once: an event the bus refused is reported as a batch item
failure and the batch is retried from there, so consumers must be (and are) idempotent.
"""

from __future__ import annotations

from collections.abc import Sequence

from rebound.engine.ports import Bus, BusEvent


def relay(events: Sequence[BusEvent], bus: Bus) -> list[str]:
    """Publish events in stream order (each keyed by its sequence number); returns the sequence
    number to retry from (the earliest refused event), or nothing."""
    failed = set(bus.publish(events))
    if not failed:
        return []
    return [next(event.key for event in events if event.key in failed)]
