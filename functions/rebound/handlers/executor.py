"""Executor: an SQS batch from the execution queue in, partial batch failures out."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from rebound import wiring
from rebound.adapters.queues import read_attributes
from rebound.engine.executor import Executor, NotEnoughTime, QueueMessage
from rebound.handlers.observability import logger_for, metrics_for

logger = logger_for("executor")
metrics = metrics_for("executor")


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics(capture_cold_start_metric=True)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> PartialItemFailureResponse:
    deps = wiring.deps()
    executor = Executor(deps, request_id=context.aws_request_id)

    def record_handler(record: SQSRecord) -> str:
        message = QueueMessage(
            message_id=record.message_id,
            body=record.body,
            receive_count=int(record.attributes.approximate_receive_count or 1),
            receipt_handle=record.receipt_handle,
            attributes=read_attributes(record.raw_event.get("messageAttributes", {})),
        )
        try:
            return executor.process(message, context.get_remaining_time_in_millis() / 1000)
        except NotEnoughTime:
            deps.queues.release("execution", record.receipt_handle)
            raise

    return process_partial_response(
        event=event,
        record_handler=record_handler,
        processor=BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False),
        context=context,
    )
