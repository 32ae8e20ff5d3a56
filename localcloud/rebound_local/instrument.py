"""What the local runtime records and injects: metrics, AWS calls, target calls, faults.

Nothing here changes handler code. Metrics and target calls are recorded by wrapping the engine's
ports; AWS calls are counted, and throttling injected, with botocore event hooks on the clients
the handlers use. A throttled call gets a real ``ThrottlingException`` response, so botocore's
own retry mode handles it exactly as it would on AWS.
"""

from __future__ import annotations

import json
import random
import threading
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import boto3
from botocore.awsrequest import AWSResponse

from rebound.adapters.targets.dispatch import TargetDispatcher
from rebound.engine.ports import Clock
from rebound.engine.ports.targets import Invocation, Outcome, TargetSpec
from rebound_local.billing import Meter
from rebound_local.invocations import SimulatedCrash as SimulatedCrash  # re-exported: it began here
from rebound_local.invocations import abandon_current
from rebound_local.invocations import in_worker as in_worker
from rebound_local.invocations import mark_worker as mark_worker


class RecordingMetrics:
    """Counts and observations, as the handlers' EMF metrics would show them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts: dict[str, float] = defaultdict(float)
        self.observations: dict[str, list[float]] = defaultdict(list)
        self.meter: Meter | None = None
        """When set, each metric is also counted into its invocation's EMF document."""

    def count(self, name: str, value: float = 1.0) -> None:
        if self.meter is not None:
            self.meter.metric(name, "Count")
        with self._lock:
            self.counts[name] += value

    def observe(self, name: str, value: float, unit: str = "Milliseconds") -> None:
        if self.meter is not None:
            self.meter.metric(name, unit)
        with self._lock:
            self.observations[name].append(value)

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            out: dict[str, Any] = dict(sorted(self.counts.items()))
            for name, values in sorted(self.observations.items()):
                if values:
                    ordered = sorted(values)
                    out[name] = {
                        "count": len(values),
                        "avg": round(sum(values) / len(values), 3),
                        "p50": ordered[len(ordered) // 2],
                        "p99": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))],
                        "max": ordered[-1],
                    }
            return out


@dataclass
class CrashPlan:
    """Crashes at named points: each time one is reached, with probability ``rate``, at most
    ``limit`` times per point (``None``: no limit). A crash kills the whole invocation."""

    points: frozenset[str] = frozenset()
    rate: float = 0.0
    seed: int = 0
    limit: int | None = None
    limits: dict[str, int] = field(default_factory=dict)
    """Per-point limits, overriding ``limit`` for the points named."""
    crashes: Counter[str] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        self._lock = threading.Lock()

    def reached(self, point: str) -> None:
        if point not in self.points or self.rate <= 0:
            return
        with self._lock:
            limit = self.limits.get(point, self.limit)
            if limit is not None and self.crashes[point] >= limit:
                return
            hit = self._rng.random() < self.rate
            if hit:
                self.crashes[point] += 1
        if hit:
            abandon_current("crash")
            raise SimulatedCrash(point)


@dataclass(frozen=True)
class TargetCall:
    run_id: str
    task_id: str
    attempt: int
    at: datetime
    ok: bool
    error_code: str | None


class RecordingTargets(TargetDispatcher):
    """Targets that also remember every real call, for the 'no target twice' invariant."""

    def __init__(self, inner: TargetDispatcher, clock: Clock) -> None:
        super().__init__(inner.invokers)
        self.clock = clock
        self.calls: list[TargetCall] = []
        self._lock = threading.Lock()

    def invoke(self, target: TargetSpec, call: Invocation) -> Outcome:
        started = self.clock.now()
        outcome = super().invoke(target, call)
        with self._lock:
            self.calls.append(
                TargetCall(call.run_id, call.task_id, call.attempt, started, outcome.ok, outcome.error_code)
            )
        return outcome


class AwsCalls:
    """Counts every API call a session's clients make, as ``service:Operation``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts: Counter[str] = Counter()

    def attach(self, session: boto3.session.Session) -> None:
        session.events.register("before-call", self._count)

    def _count(self, model: Any, **_: Any) -> None:
        self.record(f"{model.service_model.service_name}:{model.name}")

    def record(self, key: str) -> None:
        with self._lock:
            self.counts[key] += 1

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(sorted(self.counts.items()))


# The service ids botocore uses in event names, for the service names users write.
_EVENT_SERVICE = {"events": "eventbridge", "eventbridge": "eventbridge"}
_SERVICE_OF_EVENT = {"eventbridge": "events"}
THROTTLE_CODES = {
    "dynamodb": "ProvisionedThroughputExceededException",
    "sqs": "RequestThrottled",
    "sns": "ThrottledException",
    "lambda": "TooManyRequestsException",
}
"""Each service's own throttling error (botocore retries each of them); others: ThrottlingException."""


class Throttler:
    """Answers a share of calls with a throttling error, per ``service:Operation``.

    It answers on ``before-send``, which fires once per HTTP attempt, so botocore's retry mode
    sees each injected throttle and retries it as it would on AWS. botocore calls every
    ``before-send`` handler and keeps the first response, so in-process clients must not also
    register moto's stubber beside it: ``LocalCloud.attach_inproc(session, gate=throttler.respond)``
    asks the throttler first and reaches moto only if the attempt was not throttled.
    """

    def __init__(self, rates: Mapping[str, float], seed: int = 0) -> None:
        self.rates = {k: float(v) for k, v in rates.items()}
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self.injected: Counter[str] = Counter()
        self.paused = False
        """Throttle nothing while set: a simulation registers its scenario's tasks with it set, as
        setup rather than part of what is judged (and botocore's backoff sleeps in real time)."""

    def attach(self, session: boto3.session.Session) -> None:
        """For clients that send over HTTP: a throttled attempt is answered before it is sent."""
        for key, rate in self.rates.items():
            service, _, operation = key.partition(":")
            if rate <= 0 or not operation:
                continue
            event = f"before-send.{_EVENT_SERVICE.get(service, service)}.{operation}"
            session.events.register(event, self.respond)  # type: ignore[arg-type]

    def hit(self, key: str) -> bool:
        """Whether this attempt at ``key`` (``service:Operation``) is throttled."""
        rate = self.rates.get(key, 0.0)
        if rate <= 0 or self.paused:
            return False
        with self._lock:
            if self._rng.random() >= rate:
                return False
            self.injected[key] += 1
        return True

    def respond(self, event_name: str, request: Any, **kwargs: Any) -> AWSResponse | None:
        """A throttling response for this attempt, or ``None`` to let it through."""
        if not self.rates:
            return None
        _, _, rest = event_name.partition(".")
        service_id, _, operation = rest.partition(".")
        service = _SERVICE_OF_EVENT.get(service_id, service_id)
        if not self.hit(f"{service}:{operation}"):
            return None
        code = THROTTLE_CODES.get(service, "ThrottlingException")
        message = "Rate exceeded (injected by the simulator)"
        body = json.dumps({"__type": code, "message": message}).encode()
        headers = {"Content-Type": "application/x-amz-json-1.0", "x-amzn-ErrorType": code}
        return AWSResponse(request.url, 400, headers, _Raw(body))  # type: ignore[arg-type]


class _Raw:
    """The minimal raw-stream interface botocore reads a response body through."""

    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **_: Any) -> Sequence[bytes]:
        return [self._body]


@dataclass
class _Tracked:
    origin: str
    queue: str
    status: str = "live"  # live | deleted | purged
    moves: int = 0


class MessageLedger:
    """Every message SQS accepted, where it is now, and whether it was deleted.

    Fed by ``motopatch.track_messages`` from inside moto, so it sees every path a message takes:
    any client's ``SendMessage``, Scheduler deliveries, bus rule targets, redrive to a DLQ,
    deletes. ``reconcile`` then accounts for each message: deleted after processing, still in a
    queue (waiting, delayed or in flight), in a dead-letter queue, or lost.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.messages: dict[str, _Tracked] = {}
        self.sent: Counter[str] = Counter()
        self.moved: Counter[str] = Counter()

    def added(self, queue: str, message_id: str, body: str | None = None) -> None:
        with self._lock:
            tracked = self.messages.get(message_id)
            if tracked is None:
                self.messages[message_id] = _Tracked(queue, queue)
                self.sent[queue] += 1
            else:  # redrive: moto moves the message object itself to the dead-letter queue
                self.moved[f"{tracked.queue}->{queue}"] += 1
                tracked.queue = queue
                tracked.moves += 1

    def deleted(self, queue: str, message_id: str) -> None:
        with self._lock:
            tracked = self.messages.get(message_id)
            if tracked is not None:
                tracked.status = "deleted"

    def purged(self, queue: str, message_ids: Sequence[str]) -> None:
        with self._lock:
            for message_id in message_ids:
                tracked = self.messages.get(message_id)
                if tracked is not None:
                    tracked.status = "purged"

    def snapshot(self) -> dict[str, _Tracked]:
        with self._lock:
            return dict(self.messages)


@dataclass(frozen=True)
class LatencyModel:
    """How long things take in virtual time, so that a simulated burst queues up as it would on AWS.

    - ``aws_call_ms``: spent by each AWS call a handler makes (DynamoDB, SQS, EventBridge).
    - ``invocation_ms``: spent by each Lambda invocation around the handler (a warm start).
    - ``cold_start_ms``: spent instead of ``invocation_ms`` by the first invocation of each new
      concurrent execution environment (when a function reaches a concurrency it never had).
    - ``esm_start_concurrency`` / ``esm_scale_per_minute``: an SQS event source mapping starts
      with this many concurrent batches when a backlog appears and adds up to this many per
      minute while it lasts, up to the function's maximum concurrency (AWS: 5 and 300).
    - ``scheduler_invocations_per_s``: EventBridge Scheduler's target-invocation quota; fires
      beyond it in one second are delivered in the next (AWS default: 1,000 in large regions).

    Only worker threads spend time: the runtime's coordinator never waits on the clock it drives.
    The defaults (all zero or off) keep every call instantaneous and capacity unlimited by ramps.
    """

    aws_call_ms: float = 0.0
    invocation_ms: float = 0.0
    cold_start_ms: float = 0.0
    esm_start_concurrency: int | None = None
    esm_scale_per_minute: int = 300
    scheduler_invocations_per_s: int | None = None

    @property
    def active(self) -> bool:
        return (
            self.aws_call_ms > 0
            or self.invocation_ms > 0
            or self.cold_start_ms > 0
            or self.esm_start_concurrency is not None
            or self.scheduler_invocations_per_s is not None
        )
