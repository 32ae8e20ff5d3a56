"""Metrics through Powertools EMF: the ``Metrics`` port on CloudWatch."""

from __future__ import annotations

from aws_lambda_powertools import Metrics as PtMetrics
from aws_lambda_powertools.metrics import MetricUnit


class PowertoolsMetrics:
    """The handler's ``log_metrics`` decorator flushes what is counted here."""

    def __init__(self, namespace: str = "Rebound", environment: str | None = None) -> None:
        self._metrics = PtMetrics(namespace=namespace)
        # Powertools keeps its dimensions per process, shared by every ``Metrics``. A Lambda
        # process serves one environment; a test or a bench process may build handlers for
        # another after the first, and the new one replaces the old (Powertools would only warn).
        current = self._metrics.default_dimensions.get("environment")
        if environment and current != environment:
            if current is not None:
                self._metrics.dimension_set.pop("environment", None)
            self._metrics.set_default_dimensions(environment=environment)

    def count(self, name: str, value: float = 1.0) -> None:
        self._metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)

    def observe(self, name: str, value: float, unit: str = "Milliseconds") -> None:
        self._metrics.add_metric(name=name, unit=MetricUnit(unit), value=value)
