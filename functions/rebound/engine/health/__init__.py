"""Retry health: the checks (``checks``), their report (``report``), and the watch the sweeper runs
every five minutes, keeping a work order per failing check (``watch``)."""

from rebound.engine.health.checks import HEALTH_SUBJECT_PREFIX, HealthChecks, OldestAge
from rebound.engine.health.report import Check, RetryHealthQuery, RetryHealthReport, Status, Thresholds

__all__ = [
    "HEALTH_SUBJECT_PREFIX",
    "Check",
    "HealthChecks",
    "OldestAge",
    "RetryHealthQuery",
    "RetryHealthReport",
    "Status",
    "Thresholds",
]
