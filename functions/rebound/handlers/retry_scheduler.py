"""Retry scheduler: ``task.execution.failed`` events (via the retry queue) in; retries or dead letters out.

The same queue carries the reports of asynchronous attempts sent as events on Rebound's bus
(``rebound.task.heartbeat|completed|failed``): each goes to ``rebound.ops.async_reports``. A report
that is refused, or that is not a report at all, is answered in the log and not retried."""

from __future__ import annotations

import json
from typing import Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from rebound import wiring
from rebound.domain.errors import ValidationFailed
from rebound.engine.retry_scheduler import RetryScheduler
from rebound.handlers.observability import logger_for, metrics_for
from rebound.ops.async_reports import REPORT_DETAIL_TYPES, AsyncReports, report_from_event

logger = logger_for("retry_scheduler")
metrics = metrics_for("retry_scheduler")


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics(capture_cold_start_metric=True)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> PartialItemFailureResponse:
    scheduler = RetryScheduler(wiring.deps())
    scheduler.heartbeat()  # `rebound health` reads it: the worker is alive

    def record_handler(record: SQSRecord) -> str:
        body = json.loads(record.body)
        if body.get("detail-type") in REPORT_DETAIL_TYPES:
            return on_report(str(body["detail-type"]), body.get("detail"))
        detail = body["detail"]
        return scheduler.on_failed(str(detail["run_id"]), int(detail["attempt"]))

    return process_partial_response(
        event=event,
        record_handler=record_handler,
        processor=BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False),
        context=context,
    )


def on_report(detail_type: str, detail: object) -> str:
    """One report event: accepted, or refused with its reason (never retried: the answer is final)."""
    try:
        report = report_from_event(detail_type, detail)
    except ValidationFailed as exc:
        logger.warning("task report dropped: not a valid report", extra={"error": exc.message})
        return "invalid-report"
    answer = AsyncReports(wiring.deps(), "bus").report(report)
    if not answer.accepted:
        logger.warning(
            "task report refused",
            extra={"run_id": answer.run_id, "attempt": answer.attempt, "reason": answer.reason},
        )
        return f"refused-{answer.reason}"
    return f"accepted-{answer.kind.value}"
