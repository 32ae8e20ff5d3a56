"""The retry-health report runs on its own (issue 16, part 3): every five minutes from the
sweeper's handler, with the environment's thresholds; a failing check opens one work order per
finding kind, which resolves itself once the check clears; the report's figures are metrics."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from rebound.domain.work_order import DeliveryStatus, Resolution, WorkOrderState
from rebound.engine.deps import Deps
from rebound.engine.escalation import Escalation
from rebound.engine.health.watch import HealthWatch
from rebound.handlers import sweeper
from rebound.ops.workorders import WorkOrderOps
from rebound.settings import settings_from_env, settings_to_env
from support import Context, ManualClock

pytestmark = pytest.mark.integration
SUBJECT = "health#failed_retry_executions"


def sweep() -> dict[str, Any]:
    return sweeper.lambda_handler({}, Context())  # type: ignore[no-any-return]


def findings(deps: Deps) -> list[Any]:
    return [o for o in deps.store.work_orders() if o.subject.startswith("health#")]


def test_a_failing_check_opens_one_work_order_that_resolves_itself_when_it_clears(
    wired: Deps, clock: ManualClock
) -> None:
    sqs = wired.queues.client
    url = wired.settings.queue("scheduler_dlq").url
    sqs.send_message(QueueUrl=url, MessageBody='{"undeliverable": "schedule"}')

    first = sweep()
    assert first["health"]["status"] == "fail"
    [order] = findings(wired)
    assert first["health"]["opened"] == [order.work_order_id]
    assert order.subject == SUBJECT and order.state is WorkOrderState.OPEN
    assert order.reason.startswith("health_failed_retry_executions: scheduler DLQ holds 1")
    assert [(d.channel, d.status) for d in order.deliveries] == [("sns", DeliveryStatus.DELIVERED)]
    assert wired.metrics.counts["task.health.reports_total"] == 1  # type: ignore[attr-defined]
    assert wired.metrics.counts["task.health.alerts_total"] == 1  # type: ignore[attr-defined]

    assert "health" not in sweep()  # the same five-minute period: the report does not run again
    clock.sleep(300)
    assert sweep()["health"]["opened"] == []  # still failing: the open order stands, no second one
    assert len(findings(wired)) == 1
    assert wired.metrics.counts["task.health.reports_total"] == 2  # type: ignore[attr-defined]

    sqs.purge_queue(QueueUrl=url)
    clock.sleep(300)
    cleared = sweep()
    assert cleared["health"]["resolved"] == [order.work_order_id]
    resolved = wired.store.get_work_order(order.work_order_id)
    assert resolved is not None and resolved.state is WorkOrderState.RESOLVED
    assert (resolved.resolution, resolved.resolved_by) == (Resolution.FIXED, "health")
    assert resolved.resolve_reason is not None
    assert resolved.resolve_reason.startswith("failed_retry_executions is ok again")
    assert wired.metrics.counts["workorder.resolved_total"] == 1  # type: ignore[attr-defined]

    sqs.send_message(QueueUrl=url, MessageBody='{"undeliverable": "again"}')
    clock.sleep(300)
    again = sweep()
    assert len(again["health"]["opened"]) == 1 and again["health"]["opened"] != [order.work_order_id]


def test_the_thresholds_come_from_the_environment_config(deps: Deps) -> None:
    configured = deps.settings.model_copy(
        update={"health_expected_interval_minutes": 7, "health_stale_metadata_minutes": 45}
    )
    read_back = settings_from_env(settings_to_env(configured))
    assert (read_back.health_expected_interval_minutes, read_back.health_stale_metadata_minutes) == (7, 45)
    watch = HealthWatch(deps.__class__(**{**deps.__dict__, "settings": read_back}))
    thresholds = watch.thresholds()
    assert thresholds.expected_interval == timedelta(minutes=7)
    assert thresholds.stale_metadata == timedelta(minutes=45)
    assert watch.run().report.expected_interval_minutes == 7


def test_the_acknowledgement_gaps_order_does_not_count_itself(wired: Deps, clock: ManualClock) -> None:
    ops = WorkOrderOps(wired, "alice")
    late = Escalation(wired, "alice").open_by_hand("task#job", {"severity": "high", "reason": "look"})
    clock.sleep(16 * 60)  # past the 15-minute acknowledgement SLA of a high order
    opened = sweep()["health"]["opened"]
    [gaps] = [o for o in findings(wired) if o.subject == "health#acknowledgement_gaps"]
    assert gaps.work_order_id in opened and gaps.state is WorkOrderState.OPEN
    # each links the runbook that describes it, not the dead-lettered run's
    assert gaps.runbook_url is not None and gaps.runbook_url.endswith("retry-health-unhealthy.md")
    assert late.runbook_url is not None and late.runbook_url.endswith("work-order-by-hand.md")

    clock.sleep(20 * 60)  # the finding's own order is now past its SLA too, unacknowledged
    ops.ack(late.work_order_id)
    assert gaps.work_order_id in sweep()["health"]["resolved"]
    resolved = wired.store.get_work_order(gaps.work_order_id)
    assert resolved is not None and resolved.state is WorkOrderState.RESOLVED
    assert not [
        o for o in findings(wired) if o.state is not WorkOrderState.RESOLVED and o.subject == gaps.subject
    ]


def test_the_sweeper_answers_what_lambda_s_runtime_can_serialize(wired: Deps) -> None:
    """Lambda serializes a handler's answer with the standard json module; an answer it cannot
    serialize (a datetime) fails every invocation with Runtime.MarshalError."""
    answer = sweep()
    assert json.loads(json.dumps(answer)) == answer
    assert isinstance(answer["ledger"]["checked_until"], str | None)
