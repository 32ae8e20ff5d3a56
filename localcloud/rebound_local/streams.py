"""The outbox table's DynamoDB stream, read the way Lambda's event source mapping reads it.

The mapping hands the stream's records to the relay function in order, one batch at a time
(one shard, ``ParallelizationFactor`` 1), and keeps a checkpoint: the sequence number of the next
record to deliver. moto's shard holds the records; the checkpoint is kept on the shard, so that
``observe`` and ``snapshot`` count only what was not delivered yet.

- **Without ``max_retries``** (the default, as before): a failed batch is retried until it
  succeeds, from the first failed record if the function reported one; consumed records are
  dropped from moto's shard at once, so a long simulation's stream does not grow.
- **With ``max_retries`` = N** (``faults.stream_retries``), as AWS does with
  ``MaximumRetryAttempts`` N, ``BisectBatchOnFunctionError`` and an on-failure destination
  (Rebound's stack configures all three):
  - a batch the function reports partly failed is retried from the first failed record, up to
    the end of the same batch; a batch whose invocation raised, crashed or timed out is split in
    two, and the halves are retried (splitting does not count as a retry);
  - after N retries of the same batch (N + 1 invocations), the mapping sends one on-failure
    record to the destination queue and moves past the batch. The record has AWS's shape for
    DynamoDB streams: ``requestContext`` (``requestId``, ``functionArn``, ``condition``
    ``RetryAttemptsExhausted``, ``approximateInvokeCount``), ``responseContext``
    (``statusCode``, ``executedVersion``, and ``functionError`` ``Unhandled`` when the function
    raised), ``version`` ``1.0``, ``timestamp``, and ``DDBStreamBatchInfo`` (``shardId``,
    ``startSequenceNumber``, ``endSequenceNumber``, ``approximateArrivalOfFirstRecord``,
    ``approximateArrivalOfLastRecord``, ``batchSize``, ``streamArn``);
  - consumed records stay readable through the ``dynamodbstreams`` API for 24 hours of clock
    time, as DynamoDB Streams keeps them, so a failed range can be read again
    (``GetShardIterator`` ``AT_SEQUENCE_NUMBER`` + ``GetRecords``). Older records are trimmed,
    delivered or not (AWS loses undelivered records after 24 hours too; they are counted).
  - each failed try waits before the next: 1 s, doubling up to 30 s of clock time.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from rebound_local import motopatch
from rebound_local.cloud import LocalCloud

STREAM_BATCH = 100
RETENTION = timedelta(hours=24)
FIRST_BACKOFF_S = 1.0
MAX_BACKOFF_S = 30.0
_CHECKPOINT = "_rebound_checkpoint"
_patched = [False]


def install() -> None:
    """Reading a trimmed position answers ``TrimmedDataAccessException``, as DynamoDB Streams does
    (moto fails an assertion there). Applied once per process, with the other moto patches."""
    if _patched[0]:
        return
    from moto.core.exceptions import JsonRESTError
    from moto.dynamodb.models.table import StreamShard

    class TrimmedDataAccessException(JsonRESTError):
        def __init__(self) -> None:
            super().__init__(
                "TrimmedDataAccessException",
                "The operation attempted to read past the oldest stream record in a shard.",
            )

    get = StreamShard.get

    def trimmed_get(self: Any, start: int, quantity: int) -> list[dict[str, Any]]:
        if int(start) < self.starting_sequence_number:
            raise TrimmedDataAccessException()
        return get(self, int(start), quantity)

    StreamShard.get = trimmed_get  # type: ignore[method-assign]
    _patched[0] = True


def checkpoint(shard: Any) -> int:
    """The sequence number of the next record the mapping will deliver."""
    return int(shard.__dict__.get(_CHECKPOINT, shard.starting_sequence_number))


def unconsumed(shard: Any) -> list[Any]:
    """The shard's records the mapping has not delivered yet (call under ``motopatch.LOCK``)."""
    start = max(checkpoint(shard) - shard.starting_sequence_number, 0)
    return list(shard.items[start:])


@dataclass(frozen=True)
class Delivery:
    """One batch handed to the function: Lambda-shaped records, first and last sequence numbers."""

    records: list[dict[str, Any]]
    first: int
    last: int


@dataclass(frozen=True)
class FailureDestination:
    queue_name: str
    function_arn: str


class StreamMapping:
    """The event source mapping on one table's stream (see the module's docstring)."""

    def __init__(
        self,
        backend: Any,
        table_name: str,
        destination: FailureDestination,
        *,
        max_retries: int | None = None,
        batch_size: int = STREAM_BATCH,
        request_ids: Any = None,
        window_s: float = 0.0,
    ) -> None:
        self._backend = backend
        self.table_name = table_name
        self.destination = destination
        self.max_retries = max_retries
        self.batch_size = batch_size
        self.window_s = window_s
        """``MaximumBatchingWindowInSeconds``: fewer than ``batch_size`` records wait this long
        (clock time, from the oldest) before they are delivered."""
        self.window_due: datetime | None = None
        """When the records waiting for the window are delivered (None: none wait)."""
        self._request_ids = request_ids
        self._range: tuple[int, int] | None = None
        self._halves: list[tuple[int, int]] = []
        self._tries = 0
        self.retry_at: datetime | None = None
        self.failure_records = 0
        self.expired = 0
        """Records trimmed after 24 hours before they were delivered (retaining mode only)."""

    @property
    def retaining(self) -> bool:
        return self.max_retries is not None

    def _shard(self) -> Any:
        return self._backend().get_table(self.table_name).stream_shard

    # --------------------------------------------------------------------------- delivering
    def next_batch(self, now: datetime) -> Delivery | None:
        """The batch to deliver now, or None (nothing new, or a retry not due yet)."""
        if self.retry_at is not None and now < self.retry_at:
            return None
        with motopatch.LOCK:
            shard = self._shard()
            if shard is None:
                return None
            if self.retaining:
                self._trim(shard, now)
            base = shard.starting_sequence_number
            position = checkpoint(shard)
            if self._range is None:
                if self._halves:
                    self._range = self._halves.pop(0)
                else:
                    available = len(shard.items) - (position - base)
                    self.window_due = None
                    if available <= 0:
                        return None
                    if available < self.batch_size and self.window_s > 0:
                        oldest = _created(shard.items[position - base].record).replace(tzinfo=UTC)
                        due = oldest + timedelta(seconds=self.window_s)
                        if now < due:
                            self.window_due = due
                            return None
                    self._range = (position, position + min(available, self.batch_size) - 1)
                    self._tries = 0
            first, last = max(self._range[0], position), self._range[1]
            items = shard.items[first - base : last - base + 1]
        if not items:
            self._range = None
            return None
        return Delivery([_lambda_record(item.record) for item in items], first, first + len(items) - 1)

    def completed(
        self, delivery: Delivery, now: datetime, failed_from: int | None = None, error: bool = False
    ) -> int:
        """Record how the function handled ``delivery``; returns how many records it consumed.

        ``failed_from``: the first record the function reported failed; ``error``: the
        invocation raised, crashed or timed out (nothing consumed).
        """
        if not error and failed_from is None:
            self._advance(delivery.last + 1)
            self._range, self._tries, self.retry_at = None, 0, None
            return len(delivery.records)
        consumed = 0 if error else max(failed_from - delivery.first, 0)  # type: ignore[operator]
        start = delivery.first + consumed
        self._advance(start)
        if not self.retaining:
            self._range = None  # retried from the checkpoint until it succeeds, as before
            return consumed
        if error and delivery.last > start:
            middle = (start + delivery.last) // 2
            self._range = (start, middle)
            self._halves.insert(0, (middle + 1, delivery.last))
            return consumed
        self._tries += 1
        self._range = (start, delivery.last)
        if self._tries > int(self.max_retries or 0):
            self._give_up(start, delivery.last, now, error)
            self._advance(delivery.last + 1)
            self._range, self._tries, self.retry_at = None, 0, None
        else:
            backoff = min(FIRST_BACKOFF_S * 2 ** (self._tries - 1), MAX_BACKOFF_S)
            self.retry_at = now + timedelta(seconds=backoff)
        return consumed

    def _advance(self, position: int) -> None:
        with motopatch.LOCK:
            shard = self._shard()
            if shard is None:
                return
            if self.retaining:
                shard.__dict__[_CHECKPOINT] = max(position, checkpoint(shard))
                return
            done = position - shard.starting_sequence_number
            if done > 0:
                # Consumed records are dropped so a long simulation's stream does not grow without bound.
                del shard.items[:done]
                shard.starting_sequence_number += done

    def _trim(self, shard: Any, now: datetime) -> None:
        horizon = (now - RETENTION).astimezone(UTC).replace(tzinfo=None)
        items = shard.items
        count = 0
        while count < len(items) and _created(items[count].record) < horizon:
            count += 1
        if not count:
            return
        position = checkpoint(shard)
        self.expired += max(0, shard.starting_sequence_number + count - position)
        del items[:count]
        shard.starting_sequence_number += count
        shard.__dict__[_CHECKPOINT] = max(position, shard.starting_sequence_number)

    # --------------------------------------------------------------------------- giving up
    def _give_up(self, first: int, last: int, now: datetime, error: bool) -> None:
        with motopatch.LOCK:
            table = self._backend().get_table(self.table_name)
            shard = table.stream_shard
            base = shard.starting_sequence_number
            items = shard.items[first - base : last - base + 1]
            record = failure_record(
                function_arn=self.destination.function_arn,
                request_id=str(self._request_ids()) if self._request_ids else "",
                invoke_count=self._tries,
                function_error=error,
                now=now,
                shard_id=shard.id,
                stream_arn=f"{table.table_arn}/stream/{table.latest_stream_label}",
                first=first,
                last=last,
                first_created=_created(items[0].record) if items else None,
                last_created=_created(items[-1].record) if items else None,
            )
            sqs = LocalCloud.sqs_backend()
            sqs.send_message(queue_name=self.destination.queue_name, message_body=json.dumps(record))
        self.failure_records += 1


def failure_record(
    *,
    function_arn: str,
    request_id: str,
    invoke_count: int,
    function_error: bool,
    now: datetime,
    shard_id: str,
    stream_arn: str,
    first: int,
    last: int,
    first_created: datetime | None,
    last_created: datetime | None,
) -> dict[str, Any]:
    """The JSON document Lambda sends to an on-failure destination for a DynamoDB stream batch."""
    response: dict[str, Any] = {"statusCode": 200, "executedVersion": "$LATEST"}
    if function_error:
        response["functionError"] = "Unhandled"
    stamp = now.astimezone(UTC)
    return {
        "requestContext": {
            "requestId": request_id,
            "functionArn": function_arn,
            "condition": "RetryAttemptsExhausted",
            "approximateInvokeCount": invoke_count,
        },
        "responseContext": response,
        "version": "1.0",
        "timestamp": stamp.strftime("%Y-%m-%dT%H:%M:%S.") + f"{stamp.microsecond // 1000:03d}Z",
        "DDBStreamBatchInfo": {
            "shardId": shard_id,
            "startSequenceNumber": str(first),
            "endSequenceNumber": str(last),
            "approximateArrivalOfFirstRecord": _arrival(first_created or stamp),
            "approximateArrivalOfLastRecord": _arrival(last_created or stamp),
            "batchSize": last - first + 1,
            "streamArn": stream_arn,
        },
    }


def _arrival(value: datetime) -> str:
    return value.replace(tzinfo=None).strftime("%Y-%m-%dT%H:%M:%SZ")


def _created(record: dict[str, Any]) -> datetime:
    created = record["dynamodb"].get("ApproximateCreationDateTime")
    if isinstance(created, datetime):
        return created.astimezone(UTC).replace(tzinfo=None) if created.tzinfo else created
    return datetime.fromtimestamp(float(created or 0), tz=UTC).replace(tzinfo=None)


def _lambda_record(record: dict[str, Any]) -> dict[str, Any]:
    """A stream record as Lambda hands it to the function: creation time in epoch seconds, binary
    attributes (an audit record's deflated ``doc``) in base64, as JSON carries them."""
    out = dict(record)
    dynamodb = dict(out["dynamodb"])
    created = dynamodb.get("ApproximateCreationDateTime")
    if isinstance(created, datetime):
        dynamodb["ApproximateCreationDateTime"] = created.replace(tzinfo=UTC).timestamp()
    for image in ("Keys", "NewImage", "OldImage"):
        if image in dynamodb:
            dynamodb[image] = {k: _json_value(v) for k, v in dynamodb[image].items()}
    out["dynamodb"] = dynamodb
    return out


def _json_value(value: dict[str, Any]) -> dict[str, Any]:
    """One attribute value with its binary parts in base64 (``B``, ``BS``, nested in ``M``/``L``)."""
    if isinstance(value.get("B"), bytes | bytearray):
        return {"B": base64.b64encode(value["B"]).decode()}
    if "BS" in value:
        return {"BS": [base64.b64encode(b).decode() if isinstance(b, bytes) else b for b in value["BS"]]}
    if "M" in value:
        return {"M": {k: _json_value(v) for k, v in value["M"].items()}}
    if "L" in value:
        return {"L": [_json_value(v) for v in value["L"]]}
    return value
