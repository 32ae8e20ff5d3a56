"""Escalation: ``task.dead_lettered``, ``task.sla.breached`` and the workstreams' events (via the
escalation queue) in; work orders, notifications and workstream progress out."""

from __future__ import annotations

import json
from typing import Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from rebound import wiring
from rebound.domain.events import EventType as Rebound
from rebound.engine.escalation import Escalation
from rebound.engine.workstreams import Workstreams
from rebound.handlers.observability import logger_for, metrics_for

logger = logger_for("escalation")
metrics = metrics_for("escalation")


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics(capture_cold_start_metric=True)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> PartialItemFailureResponse:
    escalation = Escalation(wiring.deps())

    def record_handler(record: SQSRecord) -> str:
        event = json.loads(record.body)
        kind = event["detail-type"]
        if kind == Rebound.SLA_BREACHED:
            return escalation.on_sla_breached(event["detail"])
        if kind == Rebound.WORKSTREAM_STEP_ENDED:
            return Workstreams(escalation.deps).on_step_ended(event["detail"])
        if kind in (Rebound.WORKSTREAM_FAILED, Rebound.DEPENDENCY_CYCLE_DETECTED):
            return escalation.on_workstream_failed(event["detail"])
        if kind == Rebound.RESOURCE_EXHAUSTED:
            return escalation.on_resource_exhausted(event["detail"])
        return escalation.on_dead_lettered(event["detail"]).work_order_id

    return process_partial_response(
        event=event,
        record_handler=record_handler,
        processor=BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False),
        context=context,
    )
