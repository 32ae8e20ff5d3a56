"""Retry scheduler: ``task.execution.failed`` events (via the retry queue) in; retries or dead letters out.

The same queue carries the reports of asynchronous attempts sent as events on Rebound's bus
(``rebound.task.heartbeat|completed|failed``): each goes to ``rebound.engine.async_reports``. A report
that is refused is answered in the log and not retried; a body that is neither a report nor a
failure event goes to the control DLQ with its reason (``rebound.engine.control_messages``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rebound import wiring
from rebound.handlers.observability import invocation_keys, logger_for, metrics_for

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
    from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
    from aws_lambda_powertools.utilities.typing import LambdaContext

    from rebound.engine.deps import Deps

logger = logger_for("retry_scheduler")
metrics = metrics_for("retry_scheduler")


@invocation_keys(logger)
@metrics.log_metrics(capture_cold_start_metric=True)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> PartialItemFailureResponse:
    # Imported by the first invocation, not by the module's import (docs/performance.md, "Cold import").
    from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response

    from rebound.domain.events import EventType as Rebound
    from rebound.engine.async_reports import REPORT_DETAIL_TYPES
    from rebound.engine.control_messages import consume
    from rebound.engine.retry_scheduler import RetryScheduler

    accepted = (Rebound.EXECUTION_FAILED, *REPORT_DETAIL_TYPES)
    deps = wiring.deps()
    scheduler = RetryScheduler(deps)
    scheduler.heartbeat()  # `rebound health` reads it: the worker is alive

    def record_handler(record: SQSRecord) -> str:
        message_id, body = str(record.message_id), str(record.body)

        def handle(kind: str, detail: dict[str, Any]) -> str:
            if kind in REPORT_DETAIL_TYPES:
                return on_report(deps, message_id, body, kind, detail)
            return scheduler.on_failed(detail["run_id"], detail["attempt"])

        return consume(deps, "retry", message_id, body, accepted, handle)

    return process_partial_response(
        event=event,
        record_handler=record_handler,
        processor=BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False),
        context=context,
    )


def on_report(deps: Deps, message_id: str, body: str, detail_type: str, detail: object) -> str:
    """One report event: accepted, or refused with its reason (never retried: the answer is final).
    A report that is not valid goes to the control DLQ with what is wrong, like any bad body."""
    from rebound.domain.errors import ValidationFailed
    from rebound.engine.async_reports import AsyncReports, report_from_event
    from rebound.engine.control_messages import refuse

    try:
        report = report_from_event(detail_type, detail)
    except ValidationFailed as exc:
        refuse(deps, "retry", message_id, body, exc)
        return "refused"
    answer = AsyncReports(deps, "bus").report(report)
    if not answer.accepted:
        logger.warning(
            "task report refused",
            extra={"run_id": answer.run_id, "attempt": answer.attempt, "reason": answer.reason},
        )
        return f"refused-{answer.reason}"
    return f"accepted-{answer.kind.value}"
