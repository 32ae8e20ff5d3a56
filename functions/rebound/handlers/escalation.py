"""Escalation: ``task.dead_lettered``, ``task.sla.breached``, ``task.recovered`` and
``workorder.resolved`` events (via the escalation queue) in; work orders, their resolutions and
notifications out."""

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
from rebound.handlers.observability import logger_for, metrics_for

logger = logger_for("escalation")
metrics = metrics_for("escalation")


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics(capture_cold_start_metric=True)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> PartialItemFailureResponse:
    escalation = Escalation(wiring.deps())

    def record_handler(record: SQSRecord) -> str:
        event = json.loads(record.body)
        kind, detail = event["detail-type"], event["detail"]
        if kind == Rebound.SLA_BREACHED:
            return escalation.on_sla_breached(detail)
        if kind == Rebound.RUN_RECOVERED:
            return escalation.on_recovered(detail)
        if kind == Rebound.WORKORDER_RESOLVED:
            escalation.on_resolved(detail)
            return str(detail["work_order_id"])
        return escalation.on_dead_lettered(detail).work_order_id

    return process_partial_response(
        event=event,
        record_handler=record_handler,
        processor=BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False),
        context=context,
    )
