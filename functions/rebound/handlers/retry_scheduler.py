"""Retry scheduler: ``task.execution.failed`` events (via the retry queue) in; retries or dead letters out."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from rebound import wiring
from rebound.domain.events import EventType as Rebound
from rebound.engine.control_messages import consume
from rebound.engine.retry_scheduler import RetryScheduler
from rebound.handlers.observability import logger_for, metrics_for

logger = logger_for("retry_scheduler")
metrics = metrics_for("retry_scheduler")


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics(capture_cold_start_metric=True)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> PartialItemFailureResponse:
    deps = wiring.deps()
    scheduler = RetryScheduler(deps)
    scheduler.heartbeat()  # `rebound health` reads it: the worker is alive

    def record_handler(record: SQSRecord) -> str:
        def handle(_kind: str, detail: dict[str, Any]) -> str:
            return scheduler.on_failed(detail["run_id"], detail["attempt"])

        return consume(
            deps, "retry", str(record.message_id), str(record.body), (Rebound.EXECUTION_FAILED,), handle
        )

    return process_partial_response(
        event=event,
        record_handler=record_handler,
        processor=BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False),
        context=context,
    )
