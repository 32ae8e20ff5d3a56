"""Start the whole local system: the stand-in, its resources, the handlers' dependencies, the runtime."""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from rebound.adapters.queues import queue_name
from rebound.adapters.targets.registry import default_targets
from rebound.adapters.targets.sim import SimInvoker
from rebound.resources import FunctionSpec
from rebound.settings import Settings
from rebound.wiring import build_deps
from rebound_local import hostile
from rebound_local.billing import LogBytes, Meter
from rebound_local.clock import ScaledClock, VirtualClock
from rebound_local.cloud import LocalCloud, LocalQueueAges
from rebound_local.direct import DirectSession
from rebound_local.fanout import LocalFanout
from rebound_local.hostile import MotoFaults
from rebound_local.instrument import (
    AwsCalls,
    CrashPlan,
    LatencyModel,
    RecordingMetrics,
    RecordingTargets,
    Throttler,
)
from rebound_local.invocations import CallGate
from rebound_local.logformat import ByFunction, Routed
from rebound_local.provision import provision
from rebound_local.runtime import STALL_WALL_S, Handler, LocalRuntime
from rebound_local.scenario import Faults as FaultsConfig
from rebound_local.sim_workers import SimWorkerPlayer

log = logging.getLogger(__name__)

# Powertools reads these when the handler modules are imported and when they flush.
TRANSPORTS = ("http", "inproc", "direct")
"""How the in-runtime handlers reach moto: over HTTP (like any client), in-process through
botocore, or straight into moto's backends for the hot-path calls (see rebound_local.direct)."""

LOCAL_POWERTOOLS_ENV = {
    "POWERTOOLS_METRICS_DISABLED": "true",  # metrics are recorded by the runtime instead of printed as EMF
    "POWERTOOLS_SERVICE_NAME": "rebound-local",
    "AWS_DEFAULT_REGION": "us-east-1",
}


YIELD_MS = 1.0
"""With ``concurrency``: each AWS call a worker makes first sleeps a seeded uniform draw in [0, 1 ms]."""


@dataclass
class Faults:
    """The faults a local stack injects (``faults:`` in a scenario or ``up --faults`` file)."""

    duplicate_delivery: int = 1
    crash_points: frozenset[str] = frozenset()
    crash_rate: float = 0.0
    crash_limit: int | None = None
    crash_limits: dict[str, int] = field(default_factory=dict)
    throttle: dict[str, float] = field(default_factory=dict)
    transaction_conflict: float = 0.0
    index_lag_s: float = 0.0
    latest_receipt_only: bool = False
    handler_timeouts: bool = False
    stream_retries: int | None = None
    seed: int = 0
    throttle_in_moto: bool = False
    """Throttle in moto's request handling (every client of ``up``), not on the handlers' session."""

    @classmethod
    def from_config(cls, config: FaultsConfig, seed: int, *, throttle_in_moto: bool = False) -> Faults:
        crash = config.crash
        return cls(
            duplicate_delivery=config.duplicate_delivery,
            crash_points=frozenset(crash.points) if crash else frozenset(),
            crash_rate=crash.rate if crash else 0.0,
            crash_limit=crash.limit if crash else None,
            crash_limits=dict(crash.limits) if crash else {},
            throttle=dict(config.throttle),
            transaction_conflict=config.transaction_conflict,
            index_lag_s=config.index_lag,
            latest_receipt_only=config.receipt_handles == "latest_only",
            handler_timeouts=config.handler_timeouts == "enforce",
            stream_retries=config.stream_retries,
            seed=seed,
            throttle_in_moto=throttle_in_moto,
        )

    def in_moto(self) -> MotoFaults:
        return MotoFaults(
            transaction_conflict=self.transaction_conflict,
            index_lag_s=self.index_lag_s,
            latest_receipt_only=self.latest_receipt_only,
            throttle=dict(self.throttle) if self.throttle_in_moto else {},
            seed=self.seed,
        )

    def describe(self) -> list[str]:
        """One line per active fault, for banners."""
        lines = self.in_moto().describe()
        if self.duplicate_delivery > 1:
            copies = self.duplicate_delivery
            lines.insert(0, f"duplicate delivery: each queue batch handed to {copies} invocations")
        if self.crash_points and self.crash_rate > 0:
            limit = f", at most {self.crash_limit} per point" if self.crash_limit else ""
            lines.append(f"crashes: {self.crash_rate:g} at {', '.join(sorted(self.crash_points))}{limit}")
        if self.throttle and not self.throttle_in_moto:
            lines += [
                f"throttling: {rate:g} of the handlers' {key} calls"
                for key, rate in sorted(self.throttle.items())
            ]
        if self.handler_timeouts:
            lines.append("handler timeouts: an invocation past its Lambda timeout is abandoned")
        if self.stream_retries is not None:
            lines.append(f"stream retries: the outbox mapping gives up after {self.stream_retries} retries")
        return lines


class Deployment(Protocol):
    """Resources and functions from elsewhere than ``rebound.resources`` (a template)."""

    def provision(self, session: Any, endpoint_url: str | None, environment: str) -> Settings: ...

    def functions(self, endpoint_url: str, targets: RecordingTargets) -> Sequence[FunctionSpec]: ...

    def handler(self, spec: FunctionSpec) -> Handler: ...


@dataclass
class LocalStack:
    cloud: LocalCloud
    clock: VirtualClock | ScaledClock
    settings: Settings
    runtime: LocalRuntime
    metrics: RecordingMetrics
    aws_calls: AwsCalls
    targets: RecordingTargets
    crashes: CrashPlan
    throttler: Throttler
    moto_faults: MotoFaults
    gate: CallGate
    session: Any
    """The handlers' session (with the ``direct`` transport a ``DirectSession``)."""
    meter: Meter
    """Billable units of everything the handlers and the runtime do (``rebound_local.billing``)."""

    @property
    def deps(self) -> Any:
        return self.runtime.deps

    def stop(self) -> None:
        try:
            self.runtime.close()
        finally:
            fanout = self.deps.fanout
            if isinstance(fanout, LocalFanout):
                stuck = fanout.close()
                if stuck:
                    log.error("fan-out threads still busy at stop: %s", ", ".join(stuck))
            hostile.activate(None)
            self.cloud.stop()


def route_logs(path: Path | None, level: int = logging.INFO, meter: Meter | None = None) -> None:
    """Send the handlers' JSON logs at ``level`` to ``path`` (or nowhere when ``None``).

    Each line is written in the format of the function whose invocation logs it (``ByFunction``),
    as that function's own process on Lambda would write it. With a ``meter``, every line at
    ``INFO`` and above (the deployed level) is also measured, as CloudWatch Logs would ingest it,
    whatever ``level`` keeps.
    """
    handler: logging.Handler = logging.FileHandler(path) if path else logging.NullHandler()
    handler.setLevel(level)
    names = [
        n
        for n in logging.root.manager.loggerDict
        if n.startswith("rebound") and not n.startswith("rebound_local")
    ]
    # The functions' loggers (``rebound-<function>``) carry their Powertools formatters; on Lambda
    # the engine's loggers carry their function's (copy_config_to_registered_loggers).
    by_service = {
        n: f for n in names if n.startswith("rebound-") for f in [_own_formatter(n)] if f is not None
    }
    formatter = ByFunction(by_service, next(iter(by_service.values()), None))
    handler.setFormatter(formatter)
    measure = [LogBytes(meter, formatter)] if meter is not None else []
    for name in names:
        logger = logging.getLogger(name)
        logger.handlers = [Routed(handler, by_service.get(name)), *measure]
        logger.setLevel(level if meter is None else min(level, logging.INFO))
        logger.propagate = False


def _own_formatter(name: str) -> logging.Formatter | None:
    """The formatter the logger ``name`` was given by its function: on its Powertools handler, or
    on the ``Routed`` handler that replaced it when a stack started in this process before."""
    for handler in logging.getLogger(name).handlers:
        if not isinstance(handler, LogBytes) and handler.formatter is not None:
            return handler.formatter
    return None


def quiet_powertools_metrics() -> None:
    """Locally, metrics go to ``RecordingMetrics``; keep Powertools from printing EMF to the terminal.

    With ``POWERTOOLS_METRICS_DISABLED`` Powertools prints nothing, except the one-off cold-start
    metric and a warning about the (here, deliberately) empty metric set.
    """
    from aws_lambda_powertools.metrics.provider import cold_start

    cold_start.is_cold_start = False
    warnings.filterwarnings("ignore", message="No application metrics to publish")


def start_local(
    clock: VirtualClock | ScaledClock,
    *,
    port: int = 0,
    environment: str = "local",
    faults: Faults | None = None,
    jitter_seed: int | None = None,
    log_file: Path | None = None,
    log_level: int = logging.INFO,
    transport: str = "http",
    latency: LatencyModel | None = None,
    concurrency: int | None = None,
    executor_max_concurrency: int | None = None,
    stall_wall_s: float = STALL_WALL_S,
    deployment: Deployment | None = None,
    aws_sized: bool = False,
) -> LocalStack:
    """Start the stand-in, provision Rebound's resources and start the runtime around the handlers.

    ``concurrency``: invocations of each function that run at once, interleaving their AWS calls
    (on a ``VirtualClock``, in an order ``faults.seed`` decides); ``executor_max_concurrency``:
    the executor mapping's maximum instead of the spec's. ``deployment``: creates the resources
    instead of ``provision`` and gives the runtime its functions and their handlers (the
    rehearsal of a synthesized template, ``rebound_local.rehearse``); ``aws_sized``: resource
    names of AWS's length and the audit key named by its ARN (``provision``).
    """
    for key, value in LOCAL_POWERTOOLS_ENV.items():
        os.environ.setdefault(key, value)
    quiet_powertools_metrics()
    faults = faults or Faults()
    if transport not in TRANSPORTS:
        raise ValueError(f"transport must be one of {', '.join(TRANSPORTS)}, not {transport!r}")
    cloud = LocalCloud(port=port, clock=clock.now)
    endpoint = cloud.start()
    make = deployment.provision if deployment is not None else partial(provision, aws_sized=aws_sized)
    if transport == "http":
        settings = make(cloud.session(), endpoint, environment)
    else:  # the same resources, created without the HTTP round trips (some 60 requests)
        provisioning = cloud.session()
        cloud.attach_inproc(provisioning)
        settings = make(provisioning, None, environment)
    if jitter_seed is not None:
        settings = settings.model_copy(update={"jitter_seed": jitter_seed})
    moto_faults = faults.in_moto()
    hostile.activate(moto_faults)

    session: Any = cloud.session()
    client_kwargs: dict[str, Any] = {"endpoint_url": endpoint}
    aws_calls = AwsCalls()
    aws_calls.attach(session)
    meter = Meter(cloud.dynamodb_backend)
    meter.attach(session)
    gate = CallGate(
        clock,
        aws_call_ms=latency.aws_call_ms if latency else 0.0,
        # Interleaving needs turns only on a virtual clock; on a scaled one threads really race.
        jitter_ms=YIELD_MS if concurrency is not None and isinstance(clock, VirtualClock) else 0.0,
    )
    gate.attach(session)  # in the calling thread, before each botocore call (the direct path calls it too)
    # Throttled in moto (every client) or here (the handlers only); never both.
    throttler = Throttler({} if faults.throttle_in_moto else faults.throttle, seed=faults.seed)
    if transport == "http":
        throttler.attach(session)
    else:
        cloud.attach_inproc(session, gate=throttler.respond)
        client_kwargs = {}
    if transport == "direct":
        session = DirectSession(session, aws_calls, throttler, gate, meter)
    metrics = RecordingMetrics()
    metrics.meter = meter
    targets = RecordingTargets(
        default_targets(
            session,
            clock,
            client_kwargs,
            settings.target_rules,
            settings.environment,
            settings.tenant_secrets_role,
        ),
        clock,
    )
    crashes = CrashPlan(
        faults.crash_points, faults.crash_rate, faults.seed, faults.crash_limit, dict(faults.crash_limits)
    )
    deps = build_deps(
        settings,
        session=session,
        clock=clock,
        metrics=metrics,
        faults=crashes,
        targets=targets,
        fanout=LocalFanout(clock, gate),
        client_kwargs=client_kwargs,
    )
    # CloudWatch publishes no SQS metrics here: the local runtime reads its queues' ages itself.
    deps.queue_ages = LocalQueueAges(
        {name: queue_name(ref.url) for name, ref in settings.queues.items()}, clock.now
    )
    runtime = LocalRuntime(
        cloud,
        settings,
        deps,
        clock,
        duplicate_delivery=faults.duplicate_delivery,
        latency=latency,
        gate=gate,
        concurrency=concurrency,
        executor_max_concurrency=executor_max_concurrency,
        handler_timeouts=faults.handler_timeouts,
        stream_retries=faults.stream_retries,
        seed=faults.seed,
        stall_wall_s=stall_wall_s,
        meter=meter,
        functions=deployment.functions(endpoint, targets) if deployment is not None else None,
        handlers=deployment.handler if deployment is not None else None,
    )
    # Simulated asynchronous work reports on the bus, on this clock (rebound_local.sim_workers).
    player = SimWorkerPlayer(clock, deps.bus, settings.event_source)
    sim = targets.invokers.get("sim")
    if isinstance(sim, SimInvoker):
        sim.workers = player
        runtime.sim_workers = player
    route_logs(log_file, log_level, meter)
    return LocalStack(
        cloud,
        clock,
        settings,
        runtime,
        metrics,
        aws_calls,
        targets,
        crashes,
        throttler,
        moto_faults,
        gate,
        session,
        meter,
    )
