"""The local runtime: plays the parts of AWS that moto does not, around the unchanged handlers.

- **Lambda event source mappings (SQS).** Each function with a queue is polled with its batch size
  and the queue's visibility timeout, up to its maximum concurrency. The handler gets a
  Lambda-shaped SQS event; the messages it does not report as failures are deleted; if the
  invocation raises or crashes, none are, and they return after the visibility timeout. moto's
  receive applies the redrive policy (``maxReceiveCount``).
- **The outbox relay's stream mapping.** New records of the outbox table's DynamoDB stream are
  handed to the relay function in order, one batch at a time (``rebound_local.streams``: retries,
  bisecting, the on-failure record and 24 h retention with ``stream_retries``).
- **EventBridge Scheduler.** ``rebound_local.scheduler`` fires due schedules.
- **Bus rules.** moto itself delivers matching events to the rules' SQS targets.
- **The sweeper's one-minute schedule.**

Every invocation runs on a worker thread as an ``invocations.Invocation``: with
``handler_timeouts`` it is abandoned at its function's timeout (``SimulatedCrash`` at its next AWS
call or clock sleep), and an abandoned or crashed invocation deletes none of its messages. With
``concurrency`` N, each pump starts batches until N invocations of a function run at once, and the
clock wakes one worker at a time (``VirtualClock.interleave``), so their AWS calls interleave in
an order the seed decides.

Two drivers: ``run_virtual`` (a discrete-event clock; hours pass in seconds) and
``run_realtime`` (the wall clock, optionally scaled). ``finish`` takes no new work and serves the
clock until every invocation under way has returned; past a bound it abandons them and raises
``RuntimeHung`` saying what was still running. ``run_virtual`` raises it too when a worker stays
busy, or virtual time stands still, for ``stall_wall_s`` of wall time.
"""

from __future__ import annotations

import importlib
import itertools
import logging
import random
import threading
import time
import uuid
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from rebound import resources as r
from rebound import wiring
from rebound.engine.deps import Deps
from rebound.settings import Settings
from rebound_local import motopatch
from rebound_local.billing import Meter
from rebound_local.clock import ScaledClock, Timer, VirtualClock
from rebound_local.cloud import LocalCloud
from rebound_local.event_sources import SWEEP_EVERY, EventSources, Mapping, _next_minute
from rebound_local.instrument import LatencyModel, SimulatedCrash
from rebound_local.invocations import CallGate, Invocation, Lane, working_for
from rebound_local.provision import ACCOUNT, REGION
from rebound_local.scheduler import SchedulerEngine, random_uuid
from rebound_local.sim_workers import SimWorkerPlayer
from rebound_local.streams import FailureDestination, StreamMapping
from rebound_local.workers import Running, RuntimeHung, Stillness, WorkerPool, earliest

log = logging.getLogger(__name__)

Handler = Callable[[dict[str, Any], Any], Any]
STALL_WALL_S = 300.0
"""Wall seconds a worker may stay busy, or virtual time stand still, before the runtime gives up."""
FINISH_WALL_S = 60.0
FINISH_GRACE = timedelta(seconds=60)


class LocalContext:
    """A Lambda context whose remaining time follows the runtime's clock."""

    def __init__(
        self,
        spec: r.FunctionSpec,
        clock: VirtualClock | ScaledClock,
        environment: str,
        request_id: uuid.UUID,
    ) -> None:
        self.function_name = f"rebound-{environment}-{spec.logical}"
        self.function_version = "$LATEST"
        self.invoked_function_arn = function_arn(spec, environment)
        self.memory_limit_in_mb = spec.memory_mb
        self.aws_request_id = str(request_id)
        self.log_group_name = f"/aws/lambda/{self.function_name}"
        self.log_stream_name = "local"
        self._clock = clock
        self.deadline = clock.now() + timedelta(seconds=spec.timeout_s)

    def get_remaining_time_in_millis(self) -> int:
        return max(int((self.deadline - self._clock.now()).total_seconds() * 1000), 0)


def function_arn(spec: r.FunctionSpec, environment: str) -> str:
    return f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:rebound-{environment}-{spec.logical}"


def load_handler(path: str) -> Handler:
    module, _, name = path.rpartition(".")
    fn: Handler = getattr(importlib.import_module(module), name)
    return fn


@dataclass
class RuntimeStats:
    invocations: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    crashes: Counter[str] = field(default_factory=Counter)
    batch_item_failures: Counter[str] = field(default_factory=Counter)
    messages_delivered: Counter[str] = field(default_factory=Counter)
    peak_concurrency: Counter[str] = field(default_factory=Counter)
    cold_starts: Counter[str] = field(default_factory=Counter)
    timeouts: Counter[str] = field(default_factory=Counter)
    """Invocations abandoned at their function's timeout (``handler_timeouts: enforce``)."""
    abandoned_at_close: Counter[str] = field(default_factory=Counter)
    events_relayed: int = 0
    schedules_fired: int = 0
    sweeps: int = 0


class LocalRuntime(EventSources):
    def __init__(
        self,
        cloud: LocalCloud,
        settings: Settings,
        deps: Deps,
        clock: VirtualClock | ScaledClock,
        *,
        duplicate_delivery: int = 1,
        sweep_every: timedelta = SWEEP_EVERY,
        latency: LatencyModel | None = None,
        gate: CallGate | None = None,
        concurrency: int | None = None,
        executor_max_concurrency: int | None = None,
        handler_timeouts: bool = False,
        stream_retries: int | None = None,
        seed: int = 0,
        stall_wall_s: float = STALL_WALL_S,
        meter: Meter | None = None,
        functions: Sequence[r.FunctionSpec] | None = None,
        handlers: Callable[[r.FunctionSpec], Handler] | None = None,
    ) -> None:
        """``functions``: the functions to play (default ``rebound.resources``'); ``handlers``:
        each function's handler (default: its module imported here)."""
        self.cloud = cloud
        self.functions = tuple(functions if functions is not None else r.SPEC.functions)
        load = handlers or (lambda spec: load_handler(spec.handler))
        self.meter = meter or Meter(cloud.dynamodb_backend)
        self.settings = settings
        self.deps = deps
        self.clock = clock
        self.duplicate_delivery = max(1, duplicate_delivery)
        self.sweep_every = sweep_every
        self.stats = RuntimeStats()
        self.recent_events: deque[tuple[datetime, str, dict[str, Any]]] = deque(maxlen=200)
        self.before_relay: Callable[[list[dict[str, Any]]], None] | None = None
        """Called with each batch of outbox records just before the relay is invoked with it."""
        self.latency = latency or LatencyModel()
        self.gate = gate or CallGate(clock)
        self.concurrency = concurrency
        self.handler_timeouts = handler_timeouts
        self.seed = seed
        self.stall_wall_s = stall_wall_s
        self.running = Running()
        self.sim_workers: SimWorkerPlayer | None = None
        """Plays simulated asynchronous work (sim targets with ``behavior.async``), if attached."""
        self._lock = threading.Lock()
        self._errors: list[BaseException] = []
        self._numbers = itertools.count(1)
        self._active: Counter[str] = Counter()
        self._closing = False
        self._stalled = False
        self._ended = 0  # invocations returned: each may have freed capacity
        self._relay_busy = False
        self._ids = random.Random(f"{seed}:ids")
        """Request ids and Scheduler's execution ids: from the seed, not the system's entropy (a
        call to ``uuid4`` is a system call, and lets go of the interpreter for it)."""
        if isinstance(clock, VirtualClock):
            clock.interleave = self.gate.jitter_ms > 0
        wiring.use(deps)

        self.mappings: list[Mapping] = []
        for spec in self.functions:
            if spec.queue:
                ref = settings.queue(spec.queue)
                maximum = spec.max_concurrency or 1000
                if spec.logical == "executor" and executor_max_concurrency is not None:
                    maximum = executor_max_concurrency
                if concurrency is not None:
                    maximum = min(maximum, concurrency)
                self.mappings.append(Mapping(spec, ref.name, ref.arn, load(spec), max_concurrency=maximum))
        self._pool = WorkerPool("lambda")
        relay = next(f for f in self.functions if f.stream_table == r.OUTBOX.logical)
        self._relay_spec = relay
        self._relay = load(relay)
        self.stream = StreamMapping(
            cloud.dynamodb_backend,
            settings.table(str(relay.stream_table)),
            FailureDestination(settings.queue("control_dlq").name, function_arn(relay, settings.environment)),
            max_retries=stream_retries,
            request_ids=self._request_id,
        )
        archiver = next((f for f in self.functions if f.stream_table == r.AUDIT.logical), None)
        self._archive_busy = False
        self.archive_stream: StreamMapping | None = None
        """The archiver's mapping on the audit table's stream (None: no archiver, or no bucket)."""
        if archiver is not None and settings.archive_bucket:
            self._archiver_spec = archiver
            self._archiver = load(archiver)
            self.archive_stream = StreamMapping(
                cloud.dynamodb_backend,
                settings.table(r.AUDIT.logical),
                FailureDestination(
                    settings.queue("control_dlq").name, function_arn(archiver, settings.environment)
                ),
                max_retries=stream_retries,
                batch_size=archiver.batch_size,
                window_s=archiver.batch_window_s,
                request_ids=self._request_id,
            )
        self._sweeper_spec = next(f for f in self.functions if f.every_minute)
        self._sweeper = load(self._sweeper_spec)
        self._next_sweep = _next_minute(clock.now())
        self.scheduler = SchedulerEngine(
            cloud.scheduler_backend,
            clock.now,
            self._deliver_to_arn,
            invocations_per_s=self.latency.scheduler_invocations_per_s,
            ids=self._ids,
        )

    def _request_id(self) -> uuid.UUID:
        """A Lambda request id, drawn from the seed (for failure records)."""
        return uuid.UUID(int=random.Random(f"{self.seed}:{self.stream.failure_records}").getrandbits(128))

    # --------------------------------------------------------------------------- plumbing AWS does
    def _deliver_to_arn(self, arn: str, body: str) -> None:
        if ":sqs:" not in arn:
            raise ValueError(f"the local Scheduler only delivers to SQS queues, not {arn}")
        with motopatch.LOCK:
            self.cloud.sqs_backend().send_message(queue_name=arn.rsplit(":", 1)[-1], message_body=body)
        self.meter.scheduler_delivered()

    def _submit(self, job: Callable[..., None], *args: Any) -> None:
        """Hand an invocation to a worker thread; the clock counts it busy until it returns."""
        self.clock.begin()
        self._pool.submit(job, next(self._numbers), *args)

    def _invoke(
        self,
        spec: r.FunctionSpec,
        handler: Handler,
        event: dict[str, Any],
        number: int,
        start_ms: float = 0.0,
        messages: Sequence[str] = (),
    ) -> tuple[bool, Any]:
        """Run one invocation in this worker thread: (True, response), or (False, None) if it
        raised, crashed or was abandoned."""
        name = spec.logical
        invocation = Invocation(name, self.clock.now(), messages, number)
        # Seeded only where it is drawn from (interleaving workers); seeding costs more than a call.
        rng = random.Random(f"{self.seed}:{name}:{number}") if self.gate.jitter_ms > 0 else None
        lane = Lane(invocation, rng)
        self.running.add(invocation)
        with self._lock:
            self._active[name] += 1
            peak = self.stats.peak_concurrency
            peak[name] = max(peak[name], self._active[name])
        timer: Timer | None = None
        ok, response = False, None
        try:
            with working_for(lane):
                try:
                    self.gate.start()
                    if start_ms > 0:
                        # The environment starting, before the handler's clock.
                        self.clock.sleep(start_ms / 1000.0)
                    context = LocalContext(
                        spec, self.clock, self.settings.environment, random_uuid(self._ids)
                    )
                    invocation.deadline = context.deadline
                    if self.handler_timeouts:
                        timer = self.clock.call_at(context.deadline, lambda: self._time_out(invocation))
                    with self._lock:
                        self.stats.invocations[name] += 1
                    with self.meter.invocation(name, spec.memory_mb):
                        response = handler(event, context)
                    ok = True
                except SimulatedCrash:
                    invocation.abandon("crash")
                except Exception as exc:
                    with self._lock:
                        self.stats.errors[name] += 1
                    log.warning("%s invocation failed: %s", name, exc)
        finally:
            if timer is not None:
                timer.cancel()
            self.running.remove(invocation)
            with self._lock:
                self._active[name] -= 1
                if invocation.reason == "timeout":
                    self.stats.timeouts[name] += 1
                elif invocation.reason == "closed":
                    self.stats.abandoned_at_close[name] += 1
                elif invocation.reason is not None:
                    self.stats.crashes[name] += 1
        if invocation.dead:
            return False, None  # abandoned: whatever it returned, nobody received it
        return ok, response

    def _time_out(self, invocation: Invocation) -> None:
        if invocation.abandon("timeout"):
            # As Lambda's "Task timed out": the function's own business, counted in the report.
            log.info(
                "%s invocation #%d abandoned at its timeout (%s)",
                invocation.function,
                invocation.number,
                invocation.deadline,
            )

    # --------------------------------------------------------------------------- drivers
    def pump(self) -> bool:
        """Do everything that is due now. True if anything happened."""
        if self._errors:
            raise RuntimeError("the local runtime failed") from self._errors[0]
        did = False
        fired = self.scheduler.fire_due()
        self.stats.schedules_fired += fired
        did |= fired > 0
        if self.sim_workers is not None:
            did |= self.sim_workers.play_due() > 0
        did |= self._relay_outbox()
        did |= self._archive_audit()
        for mapping in self.mappings:
            did |= self._poll(mapping)
        did |= self._maybe_sweep()
        return did

    def next_due(self) -> datetime | None:
        """When anything is next due (never before now): a sleeper waking, or what ``_next_outside`` finds."""
        due = earliest(self.clock.next_wakeup(), self._next_outside())
        return None if due is None else max(due, self.clock.now())

    def _next_outside(self) -> datetime | None:
        """When the next thing other than a sleeper is due: a schedule, a message, a sweep, a ramp
        step, a stream retry (never before now)."""
        candidates = [self.scheduler.next_due(), self._next_sweep]
        if self.sim_workers is not None:
            candidates.append(self.sim_workers.next_due())
        if not self._relay_busy:
            candidates.append(self.stream.retry_at)
        if self.archive_stream is not None and not self._archive_busy:
            candidates += [self.archive_stream.retry_at, self.archive_stream.window_due]
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

    def _hung(self, reason: str) -> RuntimeHung:
        return RuntimeHung(reason, self.clock.now(), self.running.describe())

    def _wait_idle(self, wall_s: float | None = None) -> None:
        """Wait until no worker is busy; ``RuntimeHung`` if one stays busy for ``wall_s``."""
        limit = self.stall_wall_s if wall_s is None else wall_s
        if not self.clock.wait_idle(timeout=max(limit, 0.0)):
            self._stalled = True
            raise self._hung(f"a worker stayed busy for {limit:g} s of wall time without the clock moving")

    def _changes(self) -> tuple[int, ...]:
        """Moves whenever something may have become due sooner (``changes``) or capacity was freed."""
        versions = motopatch.versions
        return (versions["sqs"], versions["stream"], versions["scheduler"], self._ended)

    def run_virtual(self, until: datetime, on_step: Callable[[], None] | None = None) -> None:
        clock = self.clock
        assert isinstance(clock, VirtualClock), "run_virtual needs a VirtualClock"
        still = Stillness(clock, self.stall_wall_s)
        # After a pump that started nothing: the change counters then, and the next time anything
        # but a sleeper is due. While neither has moved, another pump would start nothing either.
        quiet: tuple[tuple[int, ...], datetime | None] | None = None
        while True:
            if quiet is not None and self._errors:
                raise RuntimeError("the local runtime failed") from self._errors[0]
            if (
                quiet is None
                or quiet[0] != self._changes()
                or (quiet[1] is not None and quiet[1] <= clock.now())
            ):
                progressed = self.pump()
                self._wait_idle()
                if progressed:
                    quiet = None
                else:
                    quiet = (self._changes(), self._next_outside())
            if on_step:
                on_step()
            if still.stuck():
                self._stalled = True
                raise self._hung(f"virtual time stood still for {self.stall_wall_s:g} s of wall time")
            if quiet is None:
                continue
            nxt = earliest(clock.next_wakeup(), quiet[1])
            if nxt is None or nxt > until:
                if clock.now() >= until:
                    break
                nxt = until
            elif nxt <= clock.now():
                # Something is due but could not start (no capacity): only a sleeper can free it.
                wake = clock.next_wakeup()
                if wake is None:
                    break
                nxt = wake
            clock.advance_to(nxt)
            # The workers it woke finish their turn before the next pump looks at the queues.
            self._wait_idle()
        self.drain()

    def drain(self) -> None:
        """Finish the work already due now without moving the clock."""
        still = Stillness(self.clock, self.stall_wall_s)
        while self.pump():
            self._wait_idle()
            if still.stuck():
                self._stalled = True
                raise self._hung(f"virtual time stood still for {self.stall_wall_s:g} s of wall time")
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

    def finish(self, *, virtual_bound: timedelta | None = None, wall_bound_s: float = FINISH_WALL_S) -> None:
        """Take no new work and serve the clock until every invocation under way has returned.

        On a ``VirtualClock`` this moves time on, waking sleepers, at most ``virtual_bound``
        (default: the longest function timeout plus a minute) past now; on a ``ScaledClock`` it
        waits. Past either bound, or ``wall_bound_s`` of wall time, the invocations still running
        are abandoned and ``RuntimeHung`` says what they were.
        """
        self._closing = True
        if self._stalled:  # it already failed to finish once: do not wait as long again
            wall_bound_s = min(wall_bound_s, 1.0)
        clock = self.clock
        started = time.monotonic()
        if not isinstance(clock, VirtualClock):
            scale = clock.scale
            longest = max(f.timeout_s for f in self.functions) / scale
            while len(self.running) and time.monotonic() - started < max(wall_bound_s, longest):
                time.sleep(0.02)
            if len(self.running):
                self._give_up("invocations still running when the runtime stopped")
            return
        bound = virtual_bound or timedelta(seconds=max(f.timeout_s for f in self.functions)) + FINISH_GRACE
        limit = clock.now() + bound
        while True:
            left = wall_bound_s - (time.monotonic() - started)
            if not clock.wait_idle(timeout=max(left, 0.0)):
                self._give_up(f"a worker stayed busy for {wall_bound_s:g} s of wall time while finishing")
            if not len(self.running) and clock.busy_workers == 0:
                return
            wake = clock.next_wakeup()
            if wake is None:
                self._give_up("invocations wait for something the clock cannot wake")
            elif wake > limit:
                self._give_up(f"invocations still running {bound.total_seconds():g} s after the end")
            else:
                clock.advance_to(wake)

    def _give_up(self, reason: str) -> None:
        hung = self._hung(reason)
        self.running.abandon_all("closed")
        clock = self.clock
        if isinstance(clock, VirtualClock):
            # The abandoned wake with SimulatedCrash and unwind (a stalled worker cannot).
            clock.wait_idle(timeout=0.5 if self._stalled else 5.0)
        raise hung

    def close(self) -> None:
        try:
            self.finish()
        except RuntimeHung as hung:
            log.error("the local runtime stopped with invocations still running: %s", hung)
        finally:
            stuck = self._pool.shutdown(timeout=1.0 if self._stalled else 5.0)
            if stuck:
                log.error("worker threads still busy at close: %s", ", ".join(stuck))
            wiring.use(None)
