"""Ports the engine depends on that are not AWS resources: time, metrics and crash points."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime: ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)


class Metrics(Protocol):
    def count(self, name: str, value: float = 1.0) -> None: ...

    def observe(self, name: str, value: float, unit: str = "Milliseconds") -> None: ...


class CrashPoints(Protocol):
    """Named places where fault injection may stop an invocation. A no-op on AWS."""

    def reached(self, point: str) -> None: ...


class NoCrashes:
    def reached(self, point: str) -> None:
        return None


class PowertoolsMetrics:
    """Metrics through Powertools EMF; the handler's ``log_metrics`` decorator flushes them."""

    def __init__(self, namespace: str = "Rebound", environment: str | None = None) -> None:
        from aws_lambda_powertools import Metrics as PtMetrics
        from aws_lambda_powertools.metrics import MetricUnit

        self._metrics = PtMetrics(namespace=namespace)
        self._unit = MetricUnit
        if environment:
            self._metrics.set_default_dimensions(environment=environment)

    def count(self, name: str, value: float = 1.0) -> None:
        self._metrics.add_metric(name=name, unit=self._unit.Count, value=value)

    def observe(self, name: str, value: float, unit: str = "Milliseconds") -> None:
        self._metrics.add_metric(name=name, unit=self._unit(unit), value=value)
