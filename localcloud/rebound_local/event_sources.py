"""How the local runtime plays the event sources AWS runs for the functions: the SQS event source
mappings (polled into each function's handler as Lambda-shaped batches, with the mapping's ramp),
the outbox table's stream mapping into the relay, and the sweeper's one-minute schedule (a mixin of
``LocalRuntime``)."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from rebound import resources as r
from rebound_local import motopatch
from rebound_local.clock import ScaledClock, VirtualClock
from rebound_local.cloud import LocalCloud
from rebound_local.instrument import LatencyModel, mark_worker
from rebound_local.provision import REGION
from rebound_local.streams import Delivery, StreamMapping

log = logging.getLogger(__name__)

Handler = Callable[[dict[str, Any], Any], Any]

SWEEP_EVERY = timedelta(minutes=1)

if TYPE_CHECKING:
    from rebound_local.billing import Meter as _Meter


@dataclass
class Mapping:
    spec: r.FunctionSpec
    queue_name: str
    queue_arn: str
    handler: Handler
    max_concurrency: int = 1000  # the mapping's maximum concurrency (spec, or the model's override)
    inflight: int = 0
    environments: int = 0  # the most concurrent invocations so far: each one beyond was a cold start
    backlog_since: datetime | None = None  # when the current backlog began (the scaling ramp)


class EventSources:
    """``LocalRuntime``'s event sources."""

    if TYPE_CHECKING:  # what it uses of ``LocalRuntime``
        clock: VirtualClock | ScaledClock
        stats: Any
        latency: LatencyModel
        _lock: threading.Lock
        _relay_busy: bool
        _errors: list[BaseException]
        _closing: bool
        stream: StreamMapping
        meter: _Meter
        cloud: LocalCloud
        before_relay: Callable[[list[dict[str, Any]]], None] | None
        _next_sweep: datetime
        _ended: int
        sweep_every: timedelta
        recent_events: Any
        duplicate_delivery: int
        concurrency: int | None
        _sweeper_spec: r.FunctionSpec
        _sweeper: Any
        _relay_spec: r.FunctionSpec
        _relay: Any
        archive_stream: StreamMapping | None
        _archive_busy: bool
        _archiver_spec: r.FunctionSpec
        _archiver: Any
        _submit: Callable[..., None]
        _invoke: Callable[..., tuple[bool, Any]]

    # --------------------------------------------------------------------------- SQS mappings
    def _allowed(self, mapping: Mapping, now: datetime) -> int:
        return esm_allowed(self.latency, mapping.max_concurrency, mapping.backlog_since, now)

    def _next_ramp_step(self, mapping: Mapping, now: datetime) -> datetime | None:
        return esm_next_step(self.latency, mapping.max_concurrency, mapping.backlog_since, now)

    def _poll(self, mapping: Mapping) -> bool:
        """Start batches for this mapping: one per pump, or with ``concurrency`` as many as it allows."""
        started = 0
        limit = 1 if self.concurrency is None else mapping.max_concurrency
        while started < limit and self._poll_once(mapping):
            started += 1
        return started > 0

    def _poll_once(self, mapping: Mapping) -> bool:
        capacity = self._allowed(mapping, self.clock.now()) - mapping.inflight
        if capacity <= 0 or self._closing:
            return False
        backend = self.cloud.sqs_backend()
        with motopatch.LOCK:
            queue = backend.get_queue(mapping.queue_name)
            messages = backend.receive_message(
                mapping.queue_name,
                mapping.spec.batch_size,
                wait_seconds_timeout=0,
                visibility_timeout=int(queue.visibility_timeout),
                message_attribute_names=["All"],
            )
        if not messages:
            if mapping.inflight == 0:
                mapping.backlog_since = None  # the queue is drained: the mapping scales back in
            return False
        self.meter.esm_received(len(messages))
        if mapping.backlog_since is None:
            mapping.backlog_since = self.clock.now()
        event = {"Records": [_sqs_record(m, mapping.queue_arn) for m in messages]}
        receipts = {m.id: m.receipt_handle for m in messages}
        with self._lock:
            self.stats.messages_delivered[mapping.spec.logical] += len(messages)
        for _ in range(self.duplicate_delivery):
            with self._lock:
                mapping.inflight += 1
                cold = mapping.inflight > mapping.environments
                mapping.environments = max(mapping.environments, mapping.inflight)
                peak = self.stats.peak_concurrency
                peak[mapping.spec.logical] = max(peak[mapping.spec.logical], mapping.environments)
                self.stats.cold_starts[mapping.spec.logical] += int(cold)
            start_ms = self.latency.cold_start_ms if cold else self.latency.invocation_ms
            self._submit(self._run_batch, mapping, event, receipts, start_ms)
        return True

    def _run_batch(
        self,
        number: int,
        mapping: Mapping,
        event: dict[str, Any],
        receipts: dict[str, str],
        start_ms: float = 0.0,
    ) -> None:
        mark_worker(True)
        try:
            ok, response = self._invoke(
                mapping.spec, mapping.handler, event, number, start_ms, messages=tuple(receipts)
            )
            if not ok:
                return  # error, crash or abandoned: every message returns after its visibility timeout
            failed = {item["itemIdentifier"] for item in (response or {}).get("batchItemFailures", [])}
            with self._lock:
                self.stats.batch_item_failures[mapping.spec.logical] += len(failed)
            backend = self.cloud.sqs_backend()
            if any(message_id not in failed for message_id in receipts):
                self.meter.esm_deleted()  # one DeleteMessageBatch (a batch is at most 10)
            with motopatch.LOCK:
                for message_id, receipt in receipts.items():
                    if message_id not in failed:
                        # A duplicate delivery may have deleted it already.
                        with contextlib.suppress(Exception):
                            backend.delete_message(mapping.queue_name, receipt)
        except BaseException as exc:  # a bug in the runtime itself must not vanish in a thread
            self._errors.append(exc)
        finally:
            mark_worker(False)
            with self._lock:
                mapping.inflight -= 1
                self._ended += 1
            self.clock.end()

    # --------------------------------------------------------------------------- the outbox stream
    def _relay_outbox(self) -> bool:
        if self._relay_busy or self._closing:
            return False
        delivery = self.stream.next_batch(self.clock.now())
        if delivery is None:
            return False
        if self.before_relay is not None:  # a scenario's operator acting while these are in flight
            self.before_relay(delivery.records)
        self._relay_busy = True
        self._submit(self._run_relay, delivery)
        return True

    def _run_relay(self, number: int, delivery: Delivery) -> None:
        mark_worker(True)
        try:
            ok, response = self._invoke(
                self._relay_spec,
                self._relay,
                {"Records": delivery.records},
                number,
                self.latency.invocation_ms,
                messages=(f"stream records {delivery.first}..{delivery.last}",),
            )
            failed_from: int | None = None
            if ok:
                failures = [item["itemIdentifier"] for item in (response or {}).get("batchItemFailures", [])]
                if failures:
                    sequence = [rec["dynamodb"]["SequenceNumber"] for rec in delivery.records]
                    # An identifier not in the batch fails the whole batch, as on AWS.
                    at = sequence.index(failures[0]) if failures[0] in sequence else 0
                    failed_from = delivery.first + at
            consumed = self.stream.completed(delivery, self.clock.now(), failed_from, error=not ok)
            relayed = 0
            for record in delivery.records[:consumed]:
                if record.get("eventName") == "INSERT":
                    relayed += 1
                    image = record["dynamodb"]["NewImage"]
                    self.recent_events.append(
                        (self.clock.now(), image["detail_type"]["S"], {"detail": image["detail"]["S"]})
                    )
            with self._lock:
                self.stats.events_relayed += relayed
        except BaseException as exc:
            self._errors.append(exc)
        finally:
            mark_worker(False)
            with self._lock:
                self._relay_busy = False
                self._ended += 1
            self.clock.end()

    # --------------------------------------------------------------------------- the audit stream
    def _archive_audit(self) -> bool:
        mapping = self.archive_stream
        if mapping is None or self._archive_busy or self._closing:
            return False
        delivery = mapping.next_batch(self.clock.now())
        if delivery is None:
            return False
        self._archive_busy = True
        self._submit(self._run_archiver, mapping, delivery)
        return True

    def _run_archiver(self, number: int, mapping: StreamMapping, delivery: Delivery) -> None:
        mark_worker(True)
        try:
            ok, _ = self._invoke(
                self._archiver_spec,
                self._archiver,
                {"Records": delivery.records},
                number,
                self.latency.invocation_ms,
                messages=(f"audit stream records {delivery.first}..{delivery.last}",),
            )
            mapping.completed(delivery, self.clock.now(), None, error=not ok)
        except BaseException as exc:
            self._errors.append(exc)
        finally:
            mark_worker(False)
            with self._lock:
                self._archive_busy = False
                self._ended += 1
            self.clock.end()

    # --------------------------------------------------------------------------- the sweeper
    def _maybe_sweep(self) -> bool:
        if self.clock.now() < self._next_sweep or self._closing:
            return False
        self._next_sweep = _next_minute(self.clock.now()) + (self.sweep_every - SWEEP_EVERY)
        self.stats.sweeps += 1
        self._submit(self._run_sweep)
        return True

    def _run_sweep(self, number: int) -> None:
        mark_worker(True)
        try:
            self._invoke(
                self._sweeper_spec,
                self._sweeper,
                {"source": "aws.scheduler"},
                number,
                self.latency.invocation_ms,
            )
        except BaseException as exc:
            self._errors.append(exc)
        finally:
            mark_worker(False)
            self.clock.end()


def esm_allowed(model: LatencyModel, maximum: int, backlog_since: datetime | None, now: datetime) -> int:
    """How many batches an SQS event source mapping may have in flight: its ramp, then its maximum.

    Without a ramp in the model, the maximum at once. With one, ``esm_start_concurrency`` while
    the queue is quiet and when a backlog begins, then ``esm_scale_per_minute`` more per minute.
    """
    start = model.esm_start_concurrency
    if start is None:
        return maximum
    if backlog_since is None:
        return min(start, maximum)
    minutes = (now - backlog_since).total_seconds() / 60.0
    return min(start + int(model.esm_scale_per_minute * minutes), maximum)


def esm_next_step(
    model: LatencyModel, maximum: int, backlog_since: datetime | None, now: datetime
) -> datetime | None:
    """When the ramp next allows one more batch (None: no ramp, no backlog, or at the maximum)."""
    start = model.esm_start_concurrency
    if start is None or backlog_since is None:
        return None
    allowed = esm_allowed(model, maximum, backlog_since, now)
    if allowed >= maximum:
        return None
    return backlog_since + timedelta(seconds=(allowed + 1 - start) * 60.0 / model.esm_scale_per_minute)


def _next_minute(now: datetime) -> datetime:
    return now.replace(second=0, microsecond=0) + timedelta(minutes=1)


def _sqs_record(message: Any, queue_arn: str) -> dict[str, Any]:
    attributes = {
        name: {
            "stringValue": value.get("StringValue"),
            "dataType": value.get("DataType", "String"),
            "stringListValues": [],
            "binaryListValues": [],
        }
        for name, value in (message.message_attributes or {}).items()
    }
    return {
        "messageId": message.id,
        "receiptHandle": message.receipt_handle,
        "body": message.body,
        "attributes": {
            "ApproximateReceiveCount": str(message.approximate_receive_count),
            "SentTimestamp": str(message.sent_timestamp),
            "SenderId": str(message.sender_id),
            "ApproximateFirstReceiveTimestamp": str(message.approximate_first_receive_timestamp or ""),
        },
        "messageAttributes": attributes,
        "md5OfBody": message.body_md5,
        "eventSource": "aws:sqs",
        "eventSourceARN": queue_arn,
        "awsRegion": REGION,
    }
