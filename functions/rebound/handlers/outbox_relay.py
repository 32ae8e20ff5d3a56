"""Outbox relay: the outbox table's stream in, events on the bus out."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rebound import wiring
from rebound.handlers.observability import invocation_keys, logger_for, metrics_for

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext

logger = logger_for("outbox_relay")
metrics = metrics_for("outbox_relay")


@invocation_keys(logger)
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    from rebound.adapters.streams import outbox_events  # at the first invocation, not at import
    from rebound.engine.crashpoints import AFTER_PUBLISH
    from rebound.engine.outbox import relay

    deps = wiring.deps()
    events = outbox_events(event.get("Records", []), traced=deps.settings.tracing)
    retry_from = relay(events, deps.bus)
    deps.faults.reached(AFTER_PUBLISH)  # published, not yet checkpointed: the batch comes again
    if retry_from:
        logger.warning("events not accepted by the bus; retrying", extra={"sequence_number": retry_from[0]})
    return {"batchItemFailures": [{"itemIdentifier": seq} for seq in retry_from]}
