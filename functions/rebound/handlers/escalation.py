"""Escalation: ``task.dead_lettered``, ``task.sla.breached``, ``task.recovered``,
``workorder.resolved``, the workstreams' events and their starts (``workstream.start``, from their
schedules and rules) via the escalation queue in; work orders, their resolutions, notifications
and workstream progress out."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rebound import wiring
from rebound.handlers.observability import invocation_keys, logger_for, metrics_for

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
    from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
    from aws_lambda_powertools.utilities.typing import LambdaContext

RENAMED = {
    "dependency_cycle_detected": "workstream.dependency_cycle_detected",
    "resource_exhausted": "workstream.resource_exhausted",
}
"""Event types as they were named before every type took the ``<subject>.<what happened>`` form
(docs/architecture/events.md): an event queued under the old name is handled as the new one."""

logger = logger_for("escalation")
metrics = metrics_for("escalation")


@invocation_keys(logger)
@metrics.log_metrics(capture_cold_start_metric=True)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> PartialItemFailureResponse:
    # Imported by the first invocation, not by the module's import (docs/performance.md, "Cold import").
    from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response

    from rebound.domain.events import EventType as Rebound
    from rebound.domain.schedules import WORKSTREAM_START
    from rebound.engine.control_messages import consume
    from rebound.engine.escalation import Escalation
    from rebound.engine.workstreams import Workstreams

    deps = wiring.deps()
    escalation = Escalation(deps)

    def handle(kind: str, detail: dict[str, Any]) -> str:
        kind = RENAMED.get(kind, kind)  # an event queued before its type was renamed
        if kind == Rebound.SLA_BREACHED:
            return escalation.on_sla_breached(detail)
        if kind == Rebound.WORKSTREAM_STEP_ENDED:
            return Workstreams(deps).on_step_ended(detail)
        if kind == WORKSTREAM_START:
            return Workstreams(deps).on_start(detail)
        if kind in (Rebound.WORKSTREAM_FAILED, Rebound.DEPENDENCY_CYCLE_DETECTED):
            return escalation.on_workstream_failed(detail)
        if kind == Rebound.RESOURCE_EXHAUSTED:
            return escalation.on_resource_exhausted(detail)
        if kind == Rebound.RUN_RECOVERED:
            return escalation.on_recovered(detail)
        if kind == Rebound.WORKORDER_RESOLVED:
            escalation.on_resolved(detail)
            return str(detail["work_order_id"])
        order = escalation.on_dead_lettered(detail)
        return order.work_order_id if order is not None else "superseded"

    def record_handler(record: SQSRecord) -> str:
        accepted = (
            Rebound.DEAD_LETTERED,
            Rebound.SLA_BREACHED,
            Rebound.WORKSTREAM_STEP_ENDED,
            WORKSTREAM_START,
            Rebound.WORKSTREAM_FAILED,
            Rebound.DEPENDENCY_CYCLE_DETECTED,
            Rebound.RESOURCE_EXHAUSTED,
            Rebound.RUN_RECOVERED,
            Rebound.WORKORDER_RESOLVED,
        )
        return consume(deps, "escalation", str(record.message_id), str(record.body), accepted, handle)

    return process_partial_response(
        event=event,
        record_handler=record_handler,
        processor=BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False),
        context=context,
    )
