"""Sweeper: runs every minute; repairs expired leases, lost decisions, stale plans and DLQ arrivals;
every five minutes it also runs the retry-health report (``rebound.engine.health.watch``)."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from rebound import wiring
from rebound.handlers.observability import invocation_keys, logger_for, metrics_for

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext

logger = logger_for("sweeper")
metrics = metrics_for("sweeper")


@invocation_keys(logger)
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    from rebound.engine.sweeper import STEP_MARGIN_S, Sweeper  # at the first invocation, not at import
    from rebound.engine.telemetry import SWEEPER_FAILURE

    deps = wiring.deps()

    def remaining_s() -> float:
        return float(context.get_remaining_time_in_millis()) / 1000

    def reports(detail_type: str, detail: Any) -> bool:
        from rebound.engine.async_reports import answer_event  # only when the control DLQ holds one

        return answer_event(deps, detail_type, detail)

    report = Sweeper(deps, remaining_s=remaining_s, reports=reports).sweep()
    if report.total():
        logger.warning("sweeper repaired work", extra=asdict(report))
    answer = asdict(report)
    if report.periodic and remaining_s() >= STEP_MARGIN_S:
        try:
            from rebound.engine.health.watch import HealthWatch  # every fifth sweep only

            watch = HealthWatch(deps).run()
            answer["health"] = {
                "status": watch.report.status.value,
                "opened": watch.opened,
                "resolved": watch.resolved,
            }
        except Exception:  # the report must never cost the sweep; counted, logged, next period
            logger.exception("retry health report failed")
            deps.metrics.count(SWEEPER_FAILURE)
    # Lambda's runtime serializes the answer with the standard json module; the report holds
    # datetimes (the ledger's ``checked_until``), which it cannot: as ISO strings.
    from rebound.domain.jsonutil import dumps  # with the engine: not at cold start

    return json.loads(dumps(answer))  # type: ignore[no-any-return]
