"""EventBridge: publishing outbox events to the environment's bus."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from botocore.exceptions import BotoCoreError, ClientError

from rebound.adapters.errors import translate

if TYPE_CHECKING:
    from mypy_boto3_events import EventBridgeClient
    from mypy_boto3_events.type_defs import PutEventsRequestEntryTypeDef

MAX_ENTRIES = 10


@dataclass(frozen=True)
class BusEvent:
    key: str
    source: str
    detail_type: str
    detail: str


class Bus:
    def __init__(self, client: EventBridgeClient, bus_name: str) -> None:
        self.client = client
        self.bus_name = bus_name

    def publish(self, events: Sequence[BusEvent]) -> list[str]:
        """Publish in batches of ten. Returns the keys of events EventBridge did not accept."""
        failed: list[str] = []
        for start in range(0, len(events), MAX_ENTRIES):
            chunk = events[start : start + MAX_ENTRIES]
            entries: list[PutEventsRequestEntryTypeDef] = [
                {
                    "Source": e.source,
                    "DetailType": e.detail_type,
                    "Detail": e.detail,
                    "EventBusName": self.bus_name,
                }
                for e in chunk
            ]
            try:
                resp = self.client.put_events(Entries=entries)
            except (ClientError, BotoCoreError) as exc:
                raise translate(exc, "publish events") from exc
            for event, result in zip(chunk, resp.get("Entries", []), strict=False):
                if result.get("ErrorCode"):
                    failed.append(event.key)
        return failed
