"""Executor: an SQS batch from the execution queue in, partial batch failures out.

The messages of a batch run at once (``deps.fanout``), each with the whole time the invocation
has: an attempt's deadline never depends on its place in the batch. Powertools'
``BatchProcessor`` handles records one after another, so this handler builds the partial batch
response itself.

The batch's messages are kept invisible, with one request, until just after the invocation can
end (``rebound.engine.executor.delivery.hold``), not the queue's 30 minutes: a message whose
worker died comes back then and finds its run. A message that reports a failure comes back
sooner: a staggered fire at its offset, any other failure (a throttle, contention that outlasted
its retries, a bug) after a short backoff that grows with its receive count.
"""

from __future__ import annotations

import logging
import random
from typing import TYPE_CHECKING, Any

from rebound import wiring
from rebound.handlers.observability import invocation_keys, logger_for, metrics_for

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext

logger = logger_for("executor")
metrics = metrics_for("executor")
log = logging.getLogger(__name__)

BACKOFF_BASE_S = 5.0
BACKOFF_CAP_S = 300.0


def backoff_s(receive_count: int, rng: random.Random) -> float:
    """How long a failed message stays invisible: 5 s, 10 s, 20 s ... capped at 5 minutes, jittered."""
    ceiling = min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2 ** max(receive_count - 1, 0))
    return rng.uniform(ceiling / 2, ceiling)


@invocation_keys(logger)
@metrics.log_metrics(capture_cold_start_metric=True)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    # The engine is imported by the first invocation, not by the module's import (a cold start's
    # init stays small; docs/performance.md, "Cold import"). Later calls find it in sys.modules.
    from rebound.adapters.queues import read_attributes
    from rebound.domain.errors import ReboundError
    from rebound.engine.executor import HOLD_PAST_INVOCATION_S, Deferred, Executor, QueueMessage, hold

    deps = wiring.deps()
    executor = Executor(deps, request_id=context.aws_request_id)

    def message_of(record: dict[str, Any]) -> QueueMessage:
        system = record.get("attributes") or {}
        return QueueMessage(
            message_id=str(record["messageId"]),
            body=str(record.get("body", "")),
            receive_count=int(system.get("ApproximateReceiveCount") or 1),
            receipt_handle=str(record.get("receiptHandle", "")),
            attributes=read_attributes(record.get("messageAttributes") or {}),
        )

    def handle(message: QueueMessage) -> str | None:
        """Process one message; its id if it must come back, else None."""
        try:
            executor.process(message, context.get_remaining_time_in_millis() / 1000)
            return None
        except Deferred as later:
            delay = later.delay_s
        except ReboundError as exc:
            log.warning(
                "message failed; it comes back after a backoff",
                extra={"message_id": message.message_id, "error": exc.code, "detail": exc.message},
            )
            delay = backoff_s(message.receive_count, deps.rng(message.message_id, message.receive_count))
        except Exception:
            log.exception("message failed with an unexpected error", extra={"message_id": message.message_id})
            delay = backoff_s(message.receive_count, deps.rng(message.message_id, message.receive_count))
        try:
            deps.queues.change_visibility("execution", message.receipt_handle, delay)
        except ReboundError as exc:  # it comes back after the queue's visibility timeout instead
            log.warning("could not set the message's visibility: %s", exc.message)
        return message.message_id

    messages = [message_of(record) for record in event.get("Records", [])]
    # One request keeps the whole batch invisible until after this invocation can end: a message
    # whose worker dies comes back then to find its run (a claim need not extend its own).
    left_s = context.get_remaining_time_in_millis() / 1000
    held = hold(deps.queues, messages, left_s + HOLD_PAST_INVOCATION_S)
    executor.prime(held)  # after the hold, which must come first; the threads share one epoch read
    failed = deps.fanout.map(handle, held)
    return {"batchItemFailures": [{"itemIdentifier": message_id} for message_id in failed if message_id]}
