"""The local runtime: plays the parts of AWS that moto does not, around the unchanged handlers.

- **Lambda event source mappings (SQS).** Each function with a queue is polled with its batch size
  and the queue's visibility timeout, up to its maximum concurrency. The handler gets a
  Lambda-shaped SQS event; the messages it does not report as failures are deleted; if the
  invocation raises or crashes, none are, and they return after the visibility timeout. moto's
  receive applies the redrive policy (``maxReceiveCount``).
- **The outbox relay's stream mapping.** New records of the outbox table's DynamoDB stream are
  handed to the relay function in order; a reported failure is retried from that record.
- **EventBridge Scheduler.** ``rebound_local.scheduler`` fires due schedules.
- **Bus rules.** moto itself delivers matching events to the rules' SQS targets.
- **The sweeper's one-minute schedule.**

Two drivers: ``run_virtual`` (a discrete-event clock; hours pass in seconds) and
``run_realtime`` (the wall clock, optionally scaled).
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import threading
import uuid
from collections import Counter, deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from rebound import resources as r
from rebound import wiring
from rebound.engine.deps import Deps
from rebound.settings import Settings
from rebound_local import motopatch
from rebound_local.clock import ScaledClock, VirtualClock
from rebound_local.cloud import LocalCloud
from rebound_local.instrument import LatencyModel, SimulatedCrash, mark_worker
from rebound_local.provision import ACCOUNT, REGION

log = logging.getLogger(__name__)

Handler = Callable[[dict[str, Any], Any], Any]
SWEEP_EVERY = timedelta(minutes=1)
STREAM_BATCH = 100


class LocalContext:
    """A Lambda context whose remaining time follows the runtime's clock."""

    def __init__(self, spec: r.FunctionSpec, clock: VirtualClock | ScaledClock, environment: str) -> None:
        self.function_name = f"rebound-{environment}-{spec.logical}"
        self.function_version = "$LATEST"
        self.invoked_function_arn = f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{self.function_name}"
        self.memory_limit_in_mb = spec.memory_mb
        self.aws_request_id = str(uuid.uuid4())
        self.log_group_name = f"/aws/lambda/{self.function_name}"
        self.log_stream_name = "local"
        self._clock = clock
        self._deadline = clock.now() + timedelta(seconds=spec.timeout_s)

    def get_remaining_time_in_millis(self) -> int:
        return max(int((self._deadline - self._clock.now()).total_seconds() * 1000), 0)


def load_handler(path: str) -> Handler:
    module, _, name = path.rpartition(".")
    fn: Handler = getattr(importlib.import_module(module), name)
    return fn


@dataclass
class Mapping:
    spec: r.FunctionSpec
    queue_name: str
    queue_arn: str
    handler: Handler
    inflight: int = 0
    environments: int = 0  # the most concurrent invocations so far: each one beyond was a cold start
    backlog_since: datetime | None = None  # when the current backlog began (the scaling ramp)

    @property
    def max_concurrency(self) -> int:
        return self.spec.max_concurrency or 1000


@dataclass
class RuntimeStats:
    invocations: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    crashes: Counter[str] = field(default_factory=Counter)
    batch_item_failures: Counter[str] = field(default_factory=Counter)
    messages_delivered: Counter[str] = field(default_factory=Counter)
    peak_concurrency: Counter[str] = field(default_factory=Counter)
    cold_starts: Counter[str] = field(default_factory=Counter)
    events_relayed: int = 0
    schedules_fired: int = 0
    sweeps: int = 0


class LocalRuntime:
    def __init__(
        self,
        cloud: LocalCloud,
        settings: Settings,
        deps: Deps,
        clock: VirtualClock | ScaledClock,
        *,
        duplicate_delivery: int = 1,
        sweep_every: timedelta = SWEEP_EVERY,
        max_workers: int = 32,
        latency: LatencyModel | None = None,
    ) -> None:
        self.cloud = cloud
        self.settings = settings
        self.deps = deps
        self.clock = clock
        self.duplicate_delivery = max(1, duplicate_delivery)
        self.sweep_every = sweep_every
        self.stats = RuntimeStats()
        self.recent_events: deque[tuple[datetime, str, dict[str, Any]]] = deque(maxlen=200)
        self.latency = latency or LatencyModel()
        self._lock = threading.Lock()
        self._errors: list[BaseException] = []
        wiring.use(deps)

        self.mappings: list[Mapping] = []
        for spec in r.SPEC.functions:
            if spec.queue:
                ref = settings.queue(spec.queue)
                self.mappings.append(Mapping(spec, ref.name, ref.arn, load_handler(spec.handler)))
        if self.latency.active:
            # Invocations that spend virtual time hold a thread while they wait: one per slot.
            max_workers = max(max_workers, sum(m.max_concurrency for m in self.mappings) + 8)
        self._pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="lambda")
        relay = next(f for f in r.SPEC.functions if f.stream_table)
        self._relay_spec = relay
        self._relay = load_handler(relay.handler)
        self._relay_table = settings.table(str(relay.stream_table))
        self._sweeper_spec = next(f for f in r.SPEC.functions if f.every_minute)
        self._sweeper = load_handler(self._sweeper_spec.handler)
        self._next_sweep = _next_minute(clock.now())
        from rebound_local.scheduler import SchedulerEngine

        self.scheduler = SchedulerEngine(
            cloud.scheduler_backend,
            clock.now,
            self._deliver_to_arn,
            invocations_per_s=self.latency.scheduler_invocations_per_s,
        )

    # --------------------------------------------------------------------------- plumbing AWS does
    def _deliver_to_arn(self, arn: str, body: str) -> None:
        if ":sqs:" not in arn:
            raise ValueError(f"the local Scheduler only delivers to SQS queues, not {arn}")
        with motopatch.LOCK:
            self.cloud.sqs_backend().send_message(queue_name=arn.rsplit(":", 1)[-1], message_body=body)

    def _invoke(
        self, name: str, handler: Handler, spec: r.FunctionSpec, event: dict[str, Any], start_ms: float = 0.0
    ) -> Any:
        if start_ms > 0:
            self.clock.sleep(start_ms / 1000.0)  # the environment starting, before the handler's clock
        context = LocalContext(spec, self.clock, self.settings.environment)
        with self._lock:
            self.stats.invocations[name] += 1
        try:
            return handler(event, context)
        except SimulatedCrash:
            with self._lock:
                self.stats.crashes[name] += 1
            return None
        except Exception as exc:
            with self._lock:
                self.stats.errors[name] += 1
            log.warning("%s invocation failed: %s", name, exc)
            return None

    # --------------------------------------------------------------------------- SQS mappings
    def _allowed(self, mapping: Mapping, now: datetime) -> int:
        return esm_allowed(self.latency, mapping.max_concurrency, mapping.backlog_since, now)

    def _next_ramp_step(self, mapping: Mapping, now: datetime) -> datetime | None:
        return esm_next_step(self.latency, mapping.max_concurrency, mapping.backlog_since, now)

    def _poll(self, mapping: Mapping) -> bool:
        capacity = self._allowed(mapping, self.clock.now()) - mapping.inflight
        if capacity <= 0:
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
                self.stats.peak_concurrency[mapping.spec.logical] = mapping.environments
                self.stats.cold_starts[mapping.spec.logical] += int(cold)
            start_ms = self.latency.cold_start_ms if cold else self.latency.invocation_ms
            self.clock.begin()
            self._pool.submit(self._run_batch, mapping, event, receipts, start_ms)
        return True

    def _run_batch(
        self, mapping: Mapping, event: dict[str, Any], receipts: dict[str, str], start_ms: float = 0.0
    ) -> None:
        mark_worker(True)
        try:
            response = self._invoke(mapping.spec.logical, mapping.handler, mapping.spec, event, start_ms)
            if response is None:
                return  # error or crash: every message returns after its visibility timeout
            failed = {item["itemIdentifier"] for item in response.get("batchItemFailures", [])}
            with self._lock:
                self.stats.batch_item_failures[mapping.spec.logical] += len(failed)
            backend = self.cloud.sqs_backend()
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
            self.clock.end()

    # --------------------------------------------------------------------------- the outbox stream
    def _relay_outbox(self) -> bool:
        backend = self.cloud.dynamodb_backend()
        with motopatch.LOCK:
            shard = backend.get_table(self._relay_table).stream_shard
            pending = list(shard.items[:STREAM_BATCH])
            records = [_stream_record(item.record) for item in pending]
        if not records:
            return False
        with self.clock_busy():
            response = self._invoke(
                self._relay_spec.logical, self._relay, self._relay_spec, {"Records": records}
            )
        if response is None:
            return True  # the mapping retries the same batch
        failures = [item["itemIdentifier"] for item in response.get("batchItemFailures", [])]
        done = len(records)
        if failures:
            done = [rec["dynamodb"]["SequenceNumber"] for rec in records].index(failures[0])
        for record in records[:done]:
            if record.get("eventName") == "INSERT":
                image = record["dynamodb"]["NewImage"]
                self.recent_events.append(
                    (self.clock.now(), image["detail_type"]["S"], {"detail": image["detail"]["S"]})
                )
        with self._lock:
            self.stats.events_relayed += sum(1 for rec in records[:done] if rec.get("eventName") == "INSERT")
        with motopatch.LOCK:
            # Consumed records are dropped so a long simulation's stream does not grow without bound.
            del shard.items[:done]
            shard.starting_sequence_number += done
        return done > 0

    def clock_busy(self) -> Any:
        clock = self.clock
        if isinstance(clock, VirtualClock):
            return clock.busy()
        from contextlib import nullcontext

        return nullcontext()

    # --------------------------------------------------------------------------- the sweeper
    def _maybe_sweep(self) -> bool:
        if self.clock.now() < self._next_sweep:
            return False
        self._next_sweep = _next_minute(self.clock.now()) + (self.sweep_every - SWEEP_EVERY)
        self.stats.sweeps += 1
        self.clock.begin()
        self._pool.submit(self._run_sweep)
        return True

    def _run_sweep(self) -> None:
        mark_worker(True)
        try:
            self._invoke(
                self._sweeper_spec.logical,
                self._sweeper,
                self._sweeper_spec,
                {"source": "aws.scheduler"},
                self.latency.invocation_ms,
            )
        finally:
            mark_worker(False)
            self.clock.end()

    # --------------------------------------------------------------------------- drivers
    def pump(self) -> bool:
        """Do everything that is due now. True if anything happened."""
        if self._errors:
            raise RuntimeError("the local runtime failed") from self._errors[0]
        did = False
        fired = self.scheduler.fire_due()
        self.stats.schedules_fired += fired
        did |= fired > 0
        did |= self._relay_outbox()
        for mapping in self.mappings:
            did |= self._poll(mapping)
        did |= self._maybe_sweep()
        return did

    def next_due(self) -> datetime | None:
        candidates = [self.scheduler.next_due(), self.clock.next_wakeup(), self._next_sweep]
        now = self.clock.now()
        backend = self.cloud.sqs_backend()
        with motopatch.LOCK:
            for mapping in self.mappings:
                if self._allowed(mapping, now) - mapping.inflight <= 0:
                    candidates.append(self._next_ramp_step(mapping, now))
                    continue
                queue = backend.get_queue(mapping.queue_name)
                for message in queue._messages:
                    ready_ms = max(message.visible_at, message.delayed_until) + 1
                    candidates.append(datetime.fromtimestamp(ready_ms / 1000, tz=UTC))
        future = [c for c in candidates if c is not None]
        if not future:
            return None
        return max(min(future), now)

    def run_virtual(self, until: datetime, on_step: Callable[[], None] | None = None) -> None:
        clock = self.clock
        assert isinstance(clock, VirtualClock), "run_virtual needs a VirtualClock"
        while True:
            progressed = self.pump()
            clock.wait_idle()
            if on_step:
                on_step()
            if progressed:
                continue
            nxt = self.next_due()
            if nxt is None or nxt > until:
                if clock.now() < until:
                    clock.advance_to(until)
                    continue
                break
            if nxt <= clock.now():
                # Something is due but could not start (no capacity): only a sleeper can free it.
                wake = clock.next_wakeup()
                if wake is None:
                    break
                nxt = wake
            clock.advance_to(nxt)
        self.drain()

    def drain(self) -> None:
        """Finish the work already due now without moving the clock."""
        while self.pump():
            self.clock.wait_idle()
        if self._errors:
            raise RuntimeError("the local runtime failed") from self._errors[0]

    def run_realtime(
        self, stop: threading.Event, tick_s: float = 0.05, on_step: Callable[[], None] | None = None
    ) -> None:
        while not stop.is_set():
            try:
                busy = self.pump()
            except Exception:
                log.exception("runtime step failed")
                busy = False
            if on_step:
                on_step()
            if not busy:
                stop.wait(tick_s)

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=False)
        wiring.use(None)


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


def _stream_record(record: dict[str, Any]) -> dict[str, Any]:
    out = dict(record)
    dynamodb = dict(out["dynamodb"])
    created = dynamodb.get("ApproximateCreationDateTime")
    if isinstance(created, datetime):
        dynamodb["ApproximateCreationDateTime"] = created.replace(tzinfo=UTC).timestamp()
    out["dynamodb"] = dynamodb
    return out
