"""Metrics through Powertools EMF: the ``Metrics`` port on CloudWatch."""

from __future__ import annotations

from aws_lambda_powertools import Metrics as PtMetrics
from aws_lambda_powertools.metrics import MetricUnit


class PowertoolsMetrics:
    """The handler's ``log_metrics`` decorator flushes what is counted here."""

    def __init__(self, namespace: str = "Rebound", environment: str | None = None) -> None:
        self._metrics = PtMetrics(namespace=namespace)
        if environment:
            self._metrics.set_default_dimensions(environment=environment)

    def count(self, name: str, value: float = 1.0) -> None:
        self._metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)

    def observe(self, name: str, value: float, unit: str = "Milliseconds") -> None:
        self._metrics.add_metric(name=name, unit=MetricUnit(unit), value=value)
