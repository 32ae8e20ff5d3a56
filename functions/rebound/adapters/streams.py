"""DynamoDB Streams: read again a range of the outbox stream that the relay's mapping gave up on.

The relay's event source mapping retries a failing batch a bounded number of times, then sends a
failure record (``DDBStreamBatchInfo``: stream, shard, first and last sequence number) to the
control DLQ and moves on. The records themselves stay in the stream for 24 hours, so the sweeper
reads the range again from here and publishes it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from rebound.adapters.dynamo.codec import from_item
from rebound.adapters.errors import translate
from rebound.domain.jsonutil import loads
from rebound.domain.tracing import detail_header
from rebound.engine.ports import BusEvent, StreamRange

PAGE = 1000


class StreamReader:
    """``client`` is a factory: the client is made on first use (a cold start never needs it)."""

    def __init__(self, client: Callable[[], Any]) -> None:
        self._factory = client
        self._client: Any = None

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = self._factory()
        return self._client

    def read(self, span: StreamRange) -> list[dict[str, Any]]:
        """Every record from ``first`` to ``last`` (sequence numbers, inclusive), in order."""
        doing = f"read stream records {span.first}..{span.last}"
        try:
            iterator = self.client.get_shard_iterator(
                StreamArn=span.stream_arn,
                ShardId=span.shard_id,
                ShardIteratorType="AT_SEQUENCE_NUMBER",
                SequenceNumber=span.first,
            )["ShardIterator"]
            out: list[dict[str, Any]] = []
            last = int(span.last)
            while iterator:
                page = self.client.get_records(ShardIterator=iterator, Limit=PAGE)
                records = page.get("Records", [])
                for record in records:
                    if int(record["dynamodb"]["SequenceNumber"]) > last:
                        return out
                    out.append(record)
                if not records:
                    return out
                iterator = page.get("NextShardIterator")
            return out
        except (ClientError, BotoCoreError) as exc:
            raise translate(exc, doing) from exc

    def read_events(self, span: StreamRange) -> list[BusEvent]:
        """The outbox events (inserts) from ``first`` to ``last``, in stream order."""
        return outbox_events(self.read(span))


def outbox_events(records: Iterable[Mapping[str, Any]], *, traced: bool = False) -> list[BusEvent]:
    """The outbox events of a batch of stream records (TTL deletions and updates are not events),
    each keyed by its sequence number, in stream order; ``traced``: each event about a run carries
    the run's trace (``rebound.domain.tracing``)."""
    events: list[BusEvent] = []
    for record in records:
        if record.get("eventName") != "INSERT":
            continue
        image = from_item(record["dynamodb"]["NewImage"])
        detail = str(image["detail"])
        trace = None
        if traced:
            parsed = loads(detail)
            trace = (
                detail_header(parsed, str(image.get("event_id", ""))) if isinstance(parsed, dict) else None
            )
        events.append(
            BusEvent(
                key=str(record["dynamodb"]["SequenceNumber"]),
                source=str(image["source"]),
                detail_type=str(image["detail_type"]),
                detail=detail,
                trace=trace,
            )
        )
    return events
