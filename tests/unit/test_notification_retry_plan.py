"""The delivery-retry plan (``rebound.ops.notifications``) on in-memory ports: each failed
notification delivery of a work order is retried, waits or is suppressed, with its reason; a bad
retry policy is refused naming the field; ``execute`` retries through the escalation's delivery
code, recorded on the work order and audited on its chain."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest
from fakes import FakeChannel, FakeNotifier, MemoryWorld, memory_deps

from rebound.domain.audit import verify_chain
from rebound.domain.errors import OperationalError, ValidationFailed, WorkOrderNotFound
from rebound.domain.ids import work_order_subject
from rebound.domain.notification import Notification
from rebound.domain.timefmt import iso
from rebound.domain.work_order import DeliveryStatus, Resolution, WorkOrder
from rebound.engine.escalation import Escalation
from rebound.engine.ports import DeliveryFailed
from rebound.ops.notifications import RETRIED, Decision, NotificationOps, PlannedDelivery
from rebound.ops.workorders import WorkOrderOps
from support import START

pytestmark = pytest.mark.unit
OPERATOR = "arn:aws:iam::123456789012:user/oncall"


@dataclass
class FlakyChannel:
    """A channel that fails (``HTTP 503``) while ``down``."""

    name: str
    down: bool = True
    sent: list[Notification] = field(default_factory=list)

    def send(self, note: Notification) -> str:
        if self.down:
            raise DeliveryFailed(self.name, "HTTP 503")
        self.sent.append(note)
        return "HTTP 202"


@dataclass
class Setup:
    world: MemoryWorld
    sns: FakeChannel
    slack: FlakyChannel
    pagerduty: FlakyChannel
    order: WorkOrder

    def ops(self, actor: str = "reader") -> NotificationOps:
        return NotificationOps(self.world.deps, actor)

    def plan(self, **request: Any) -> dict[str, PlannedDelivery]:
        return {d.channel: d for d in self.ops().plan(request).deliveries}

    def stored(self) -> WorkOrder:
        order = self.world.store.get_work_order(self.order.work_order_id)
        assert order is not None
        return order


@pytest.fixture
def setup() -> Setup:
    """A dead letter's work order: SNS delivered, Slack and PagerDuty failed once, at START."""
    world = memory_deps()
    sns, slack, pagerduty = FakeChannel("sns"), FlakyChannel("slack"), FlakyChannel("pagerduty")
    world.deps.notifier = FakeNotifier(sns, slack, pagerduty)
    detail = {"subject": "msg#m-1", "reason": "malformed", "dead_lettered_at": iso(START)}
    with pytest.raises(OperationalError, match="notification failed for slack, pagerduty"):
        Escalation(world.deps).on_dead_lettered(detail)
    [order] = world.store.work_orders()
    assert {d.channel: (d.status, d.attempts) for d in order.deliveries} == {
        "sns": (DeliveryStatus.DELIVERED, 1),
        "slack": (DeliveryStatus.FAILED, 1),
        "pagerduty": (DeliveryStatus.FAILED, 1),
    }
    return Setup(world, sns, slack, pagerduty, order)


# ----------------------------------------------------------------------------- the decisions
def test_a_failed_delivery_waits_for_its_backoff_and_says_until_when(setup: Setup) -> None:
    setup.world.clock.advance(60)
    plan = setup.ops().plan({"generated_by": "console"})

    assert plan.generated_by == "console" and plan.generated_at == setup.world.clock.now()
    assert plan.counts == {Decision.RETRY: 0, Decision.WAIT: 2, Decision.SUPPRESS: 0}
    slack = {d.channel: d for d in plan.deliveries}["slack"]
    assert slack.decision is Decision.WAIT and slack.retry_at == START + timedelta(minutes=5)
    assert slack.reason == (
        f"failed 1 time(s), the last at {iso(START)} (HTTP 503); "
        f"backoff: retry 1 is due 5m after it, at {iso(START + timedelta(minutes=5))}"
    )
    assert (slack.attempts, slack.last_detail, slack.work_order_id) == (
        1,
        "HTTP 503",
        setup.order.work_order_id,
    )
    assert "sns" not in {d.channel for d in plan.deliveries}  # delivered: nothing to decide


def test_a_failed_delivery_is_retried_once_its_backoff_has_passed(setup: Setup) -> None:
    setup.world.clock.advance(5 * 60)
    slack = setup.plan()["slack"]
    assert slack.decision is Decision.RETRY and slack.retry_at is None
    assert slack.reason.endswith("; the 5m backoff has passed")

    longer = setup.plan(retry_policy={"retry_delay_minutes": 10})["slack"]
    assert longer.decision is Decision.WAIT and longer.retry_at == START + timedelta(minutes=10)


def test_immediate_retry_skips_the_wait_after_a_first_failure_only(setup: Setup) -> None:
    slack = setup.plan(retry_policy={"allow_immediate_retry": True})["slack"]
    assert slack.decision is Decision.RETRY
    assert slack.reason.endswith("; a first failure is retried at once (allow_immediate_retry)")

    setup.world.clock.advance(60)
    setup.ops(OPERATOR).execute({"retry_policy": {"allow_immediate_retry": True}})  # fails again: 2 attempts
    again = setup.plan(retry_policy={"allow_immediate_retry": True})["slack"]
    assert again.decision is Decision.WAIT  # the second retry waits 5m x 2


def test_the_wait_grows_by_the_backoff_multiplier_with_each_retry(setup: Setup) -> None:
    for _ in range(2):  # attempts 2 and 3, at once
        setup.ops(OPERATOR).execute(
            {"retry_policy": {"allow_immediate_retry": True, "retry_delay_minutes": 0}}
        )
    last = setup.stored().deliveries[-1].at
    slack = setup.plan(retry_policy={"retry_delay_minutes": 5, "backoff_multiplier": 3})["slack"]
    assert slack.attempts == 3 and slack.decision is Decision.WAIT
    assert slack.retry_at == last + timedelta(minutes=45)  # 5m x 3^2
    assert "backoff: retry 3 is due 45m after it" in slack.reason


def test_a_delivery_that_used_up_its_retries_is_suppressed(setup: Setup) -> None:
    setup.world.clock.advance(3600)
    slack = setup.plan(retry_policy={"max_retry_attempts": 0})["slack"]
    assert slack.decision is Decision.SUPPRESS
    assert slack.reason == "0 retries after the first attempt already; max_retry_attempts is 0"
    assert setup.plan(retry_policy={"max_retry_attempts": 1})["slack"].decision is Decision.RETRY


def test_an_acknowledged_or_resolved_work_order_suppresses_its_deliveries(setup: Setup) -> None:
    setup.world.clock.advance(3600)
    WorkOrderOps(setup.world.deps, OPERATOR).ack(setup.order.work_order_id)
    slack = setup.plan()["slack"]
    assert slack.decision is Decision.SUPPRESS and slack.work_order_state.value == "acknowledged"
    at = iso(setup.world.clock.now())
    assert slack.reason == f"the work order was acknowledged by {OPERATOR} at {at}: someone is on it"

    WorkOrderOps(setup.world.deps, OPERATOR).resolve(setup.order.work_order_id, Resolution.FIXED)
    assert setup.plan() == {}  # resolved work orders are left out ...
    named = setup.plan(work_order_id=setup.order.work_order_id)["pagerduty"]  # ... unless named
    assert named.decision is Decision.SUPPRESS and named.reason.startswith("the work order was resolved by ")


def test_a_channel_no_longer_configured_is_suppressed(setup: Setup) -> None:
    setup.world.clock.advance(3600)
    setup.world.deps.notifier = FakeNotifier(setup.sns, setup.slack)
    plan = setup.plan()
    assert plan["slack"].decision is Decision.RETRY
    assert plan["pagerduty"].decision is Decision.SUPPRESS
    assert plan["pagerduty"].reason == "channel 'pagerduty' is not configured in this environment"


def test_filters_and_an_unknown_work_order(setup: Setup) -> None:
    assert set(setup.plan(channel="slack")) == {"slack"}
    with pytest.raises(WorkOrderNotFound):
        setup.plan(work_order_id="wo-nope")


@pytest.mark.parametrize(
    ("request_body", "field", "problem"),
    [
        ({"retry_policy": {"max_retry_attempts": -1}}, "retry_policy.max_retry_attempts", ">= 0"),
        (
            {"retry_policy": {"retry_delay_minutes": "soon"}},
            "retry_policy.retry_delay_minutes",
            "valid number",
        ),
        ({"retry_policy": {"retry_delay_minutes": 2000}}, "retry_policy.retry_delay_minutes", "<= 1440"),
        ({"retry_policy": {"backoff_multiplier": 0.5}}, "retry_policy.backoff_multiplier", ">= 1"),
        (
            {"retry_policy": {"allow_immediate_retry": "maybe"}},
            "retry_policy.allow_immediate_retry",
            "boolean",
        ),
        ({"retry_policy": {"max_retries": 3}}, "retry_policy.max_retries", "unknown field"),
        ({"generated_by": 7}, "generated_by", "valid string"),
    ],
)
def test_a_bad_retry_policy_is_refused_naming_the_field(
    setup: Setup, request_body: dict[str, Any], field: str, problem: str
) -> None:
    problem = problem.replace(">= ", "greater than or equal to ").replace("<= ", "less than or equal to ")
    for call in (setup.ops().plan, setup.ops(OPERATOR).execute):
        with pytest.raises(ValidationFailed) as caught:
            call(request_body)
        assert caught.value.details["key_path"] == field
        assert caught.value.message.startswith(f"{field}: ") and problem in caught.value.message
    assert setup.slack.sent == [] and len(setup.stored().deliveries) == 3  # nothing was sent


# ----------------------------------------------------------------------------- execute
def test_execute_retries_what_the_plan_says_recorded_and_audited(setup: Setup) -> None:
    setup.world.clock.advance(6 * 60)
    setup.slack.down = False  # Slack is back; PagerDuty still answers 503
    result = setup.ops(OPERATOR).execute({"generated_by": "incident-42"})

    assert [(r.channel, r.status, r.attempts, r.detail, r.recorded) for r in result.retried] == [
        ("slack", DeliveryStatus.DELIVERED, 2, "HTTP 202", True),
        ("pagerduty", DeliveryStatus.FAILED, 2, "HTTP 503", True),
    ]
    assert (result.delivered, result.failed) == (1, 1)
    assert result.plan.counts[Decision.RETRY] == 2 and len(setup.slack.sent) == 1
    assert len(setup.sns.sent) == 1  # delivered before: not sent again

    order = setup.stored()
    now = setup.world.clock.now()
    assert {d.channel: (d.status, d.attempts, d.at) for d in order.deliveries} == {
        "sns": (DeliveryStatus.DELIVERED, 1, START),
        "slack": (DeliveryStatus.DELIVERED, 2, now),
        "pagerduty": (DeliveryStatus.FAILED, 2, now),
    }
    subject = work_order_subject(order.work_order_id)
    trail = setup.world.store.audit_trail(subject)
    assert verify_chain(subject, trail).ok
    record = trail[-1]
    assert (record.action, record.actor) == (RETRIED, OPERATOR)
    assert record.evidence["generated_by"] == "incident-42"
    assert record.evidence["slack"] == {"status": "delivered", "attempt": 2, "detail": "HTTP 202"}
    assert record.evidence["pagerduty"] == {"status": "failed", "attempt": 2, "detail": "HTTP 503"}
    assert record.evidence["reasons"]["slack"].endswith("the 5m backoff has passed")
    assert record.evidence["retry_policy"]["max_retry_attempts"] == 10

    # The next plan: Slack is done; PagerDuty failed again and waits 10 minutes (5m x 2).
    after = setup.plan()
    assert set(after) == {"pagerduty"} and after["pagerduty"].decision is Decision.WAIT
    assert after["pagerduty"].retry_at == now + timedelta(minutes=10)


def test_execute_with_nothing_to_retry_sends_and_records_nothing(setup: Setup) -> None:
    seq = setup.stored().audit_seq
    result = setup.ops(OPERATOR).execute({})  # both wait
    assert result.retried == [] and (result.delivered, result.failed) == (0, 0)
    assert result.plan.counts[Decision.WAIT] == 2
    assert setup.stored().audit_seq == seq and setup.slack.sent == []


def test_escalation_still_retries_only_the_channels_that_failed(setup: Setup) -> None:
    setup.slack.down = setup.pagerduty.down = False
    order = Escalation(setup.world.deps).notify(setup.stored())
    assert {d.channel: d.attempts for d in order.deliveries} == {"sns": 1, "slack": 2, "pagerduty": 2}
    assert len(setup.sns.sent) == 1
    assert setup.world.store.audit_trail(work_order_subject(order.work_order_id))[-1].action == "notified"
