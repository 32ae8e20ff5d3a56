"""Start the whole local system: the stand-in, its resources, the handlers' dependencies, the runtime."""

from __future__ import annotations

import logging
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rebound.engine.ports import SequentialFanout
from rebound.settings import Settings
from rebound.targets.registry import default_targets
from rebound.wiring import build_deps
from rebound_local.clock import ScaledClock, VirtualClock
from rebound_local.cloud import LocalCloud
from rebound_local.direct import CallLatency, DirectSession
from rebound_local.instrument import (
    AwsCalls,
    CrashPlan,
    LatencyModel,
    RecordingMetrics,
    RecordingTargets,
    Throttler,
)
from rebound_local.provision import provision
from rebound_local.runtime import LocalRuntime

# Powertools reads these when the handler modules are imported and when they flush.
TRANSPORTS = ("http", "inproc", "direct")
"""How the in-runtime handlers reach moto: over HTTP (like any client), in-process through
botocore, or straight into moto's backends for the hot-path calls (see rebound_local.direct)."""

LOCAL_POWERTOOLS_ENV = {
    "POWERTOOLS_METRICS_DISABLED": "true",  # metrics are recorded by the runtime instead of printed as EMF
    "POWERTOOLS_SERVICE_NAME": "rebound-local",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@dataclass
class Faults:
    duplicate_delivery: int = 1
    crash_points: frozenset[str] = frozenset()
    crash_rate: float = 0.0
    throttle: dict[str, float] = field(default_factory=dict)
    seed: int = 0


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

    @property
    def deps(self) -> Any:
        return self.runtime.deps

    def stop(self) -> None:
        self.runtime.close()
        self.cloud.stop()


def route_logs(path: Path | None, level: int = logging.INFO) -> None:
    """Send the handlers' JSON logs to ``path`` (or silence them below WARNING when ``None``)."""
    handler: logging.Handler = logging.FileHandler(path) if path else logging.NullHandler()
    for name in list(logging.root.manager.loggerDict):
        if name.startswith("rebound") and not name.startswith("rebound_local"):
            logger = logging.getLogger(name)
            formatter = next((h.formatter for h in logger.handlers if h.formatter), None)
            logger.handlers = [handler]
            if formatter:
                handler.setFormatter(formatter)
            logger.setLevel(level)
            logger.propagate = False


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
    max_workers: int = 32,
    transport: str = "http",
    latency: LatencyModel | None = None,
) -> LocalStack:
    for key, value in LOCAL_POWERTOOLS_ENV.items():
        os.environ.setdefault(key, value)
    quiet_powertools_metrics()
    faults = faults or Faults()
    cloud = LocalCloud(port=port, clock=clock.now)
    endpoint = cloud.start()
    settings = provision(cloud.session(), endpoint, environment)
    if jitter_seed is not None:
        settings = settings.model_copy(update={"jitter_seed": jitter_seed})

    if transport not in TRANSPORTS:
        raise ValueError(f"transport must be one of {', '.join(TRANSPORTS)}, not {transport!r}")
    if latency is not None and latency.aws_call_ms > 0 and transport != "direct":
        raise ValueError("a latency model with aws_call_ms needs the direct transport")
    session: Any = cloud.session()
    client_kwargs: dict[str, Any] = {"endpoint_url": endpoint}
    aws_calls = AwsCalls()
    aws_calls.attach(session)
    throttler = Throttler(faults.throttle, seed=faults.seed)
    if transport == "http":
        throttler.attach(session)
    else:
        cloud.attach_inproc(session, gate=throttler.respond)
        client_kwargs = {}
    if transport == "direct":
        call_latency = CallLatency(clock, latency.aws_call_ms) if latency and latency.aws_call_ms else None
        session = DirectSession(session, aws_calls, throttler, call_latency)
    metrics = RecordingMetrics()
    targets = RecordingTargets(default_targets(session, clock, client_kwargs), clock)
    crashes = CrashPlan(faults.crash_points, faults.crash_rate, faults.seed)
    deps = build_deps(
        settings,
        session=session,
        clock=clock,
        metrics=metrics,
        faults=crashes,
        targets=targets,
        client_kwargs=client_kwargs,
        # Threads the virtual clock does not know would break its accounting of busy workers.
        fanout=SequentialFanout(),
    )
    runtime = LocalRuntime(
        cloud,
        settings,
        deps,
        clock,
        duplicate_delivery=faults.duplicate_delivery,
        max_workers=max_workers,
        latency=latency,
    )
    route_logs(log_file, log_level)
    return LocalStack(cloud, clock, settings, runtime, metrics, aws_calls, targets, crashes, throttler)
