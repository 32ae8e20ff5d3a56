"""Metric names (from ARCHITECTURE.md, Telemetry) and the structured log fields."""

from __future__ import annotations

RETRY_SCHEDULED = "task.retry.scheduled_total"
RETRY_SUCCESS = "task.retry.success_total"
RETRY_FAILURE = "task.retry.failure_total"
RETRY_DLQ = "task.retry.dlq_total"
RETRY_ESCALATED = "task.retry.escalated_total"
SCHEDULER_ON_TIME = "task.scheduler.on_time_rate"
SCHEDULER_MISSED = "task.scheduler.missed_total"
EXECUTION_SUCCESS = "task.execution.success_total"
EXECUTION_RETRY = "task.execution.retry_total"
EXECUTION_FAILURE = "task.execution.failure_total"
EXECUTION_DURATION = "task.execution.duration_ms"
SLA_BREACH = "task.sla.breach_total"
SCHEDULING_SUCCESS = "task.scheduling.success_total"
SCHEDULING_FAILURE = "task.scheduling.failure_total"
WORKORDER_OPENED = "task.workorder.opened_total"
WORKORDER_FAILURE = "task.workorder.failure_total"
NOTIFICATION_FAILURE = "task.notification.failure_total"
LOCK_CONTENTION = "task.lock.contention_rate"
AUDIT_FAILURE = "task.audit.failure_total"
INVALID_MESSAGE = "task.message.invalid_total"
LEASE_EXPIRED = "task.lease.expired_total"
OUTCOME_DISCARDED = "task.execution.outcome_discarded_total"
SWEEPER_FAILURE = "task.sweeper.failure_total"

ON_TIME_WINDOW_S = 60
