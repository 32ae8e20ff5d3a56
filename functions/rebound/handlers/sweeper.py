"""Sweeper: runs every minute; repairs expired leases, lost decisions, stale plans and DLQ arrivals."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from rebound import wiring
from rebound.engine.sweeper import Sweeper
from rebound.handlers.observability import logger_for, metrics_for

logger = logger_for("sweeper")
metrics = metrics_for("sweeper")


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    report = Sweeper(wiring.deps()).sweep()
    if report.total():
        logger.warning("sweeper repaired work", extra=asdict(report))
    return asdict(report)
