"""Which function emits each metric the alarms watch.

Powertools writes Rebound's metrics (EMF) with two dimensions: ``environment`` and ``service``,
the ``service`` being the emitting function's one service name (``rebound.resources.service_name``
of its ``FunctionSpec.logical``, as in its logs). CloudWatch matches an alarm's metric by its exact
dimensions, so an alarm sums the metric over every function that emits it, as listed here.
Keep this in step with the engine: a metric emitted from a new place needs its function here.
"""

from __future__ import annotations

from rebound.engine import telemetry as m

EMITTERS: dict[str, tuple[str, ...]] = {
    m.RETRY_SUCCESS: ("executor",),
    m.RETRY_FAILURE: ("executor",),
    m.SCHEDULER_ON_TIME: ("executor",),
    m.LOCK_CONTENTION: ("executor",),
    m.SCHEDULING_SUCCESS: ("executor", "retry_scheduler", "sweeper"),
    m.SCHEDULING_FAILURE: ("executor", "retry_scheduler", "sweeper"),
    m.WORKORDER_OPENED: ("escalation",),
    m.WORKORDER_FAILURE: ("escalation",),
    m.SLA_BREACH: ("executor", "sweeper"),
    m.SWEEPER_FAILURE: ("sweeper",),
    m.RETRY_RECOVERED: ("executor",),
    m.EXECUTION_SUCCESS: ("executor",),
    m.EXECUTION_FAILURE: ("executor",),
    m.SCHEDULER_MISSED: ("sweeper",),
    m.WORKORDER_RESOLVED: ("escalation", "ops_api"),
    m.WORKORDER_TIME_TO_RESOLVE: ("escalation", "ops_api"),
    m.WORKORDER_COMPLETION_RATE: ("sweeper",),
    m.HEALTH_REPORTS: ("sweeper",),
    m.HEALTH_ALERTS: ("sweeper",),
    m.DELIVERY_RETRY_PLANS: ("sweeper",),
    m.RETRYABLE_DELIVERIES: ("sweeper",),
}
