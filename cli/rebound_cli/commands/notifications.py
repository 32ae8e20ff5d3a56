"""``rebound notifications``: failed work-order notifications: plan their retries, and retry them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from rebound.ops.authz import Environment
from rebound.ops.notifications import Decision, DeliveryRetryPlan, DeliveryRetryPolicy, DeliveryRetryRequest
from rebound_cli import output as out
from rebound_cli.authz import authorized
from rebound_cli.context import App
from rebound_cli.errors import EXIT_FAILED
from rebound_cli.model_options import model_options, request

F = TypeVar("F", bound=Callable[..., Any])
POLICY = tuple(DeliveryRetryPolicy.model_fields)


def plan_options(fn: F) -> F:
    """The options ``plan`` and ``retry`` share: the retry policy, the filters and ``--generated-by``."""
    fn = model_options(
        DeliveryRetryRequest, ["work_order_id", "channel", "generated_by"], generated_by="rebound-cli"
    )(fn)
    return model_options(DeliveryRetryPolicy, POLICY)(fn)


def _request(kwargs: dict[str, Any]) -> DeliveryRetryRequest:
    policy = {key: kwargs.pop(key) for key in POLICY}
    return request(DeliveryRetryRequest, {**kwargs, "retry_policy": policy})


def _render_plan(plan: DeliveryRetryPlan) -> None:
    out.table(
        f"failed deliveries in {plan.environment}",
        ["work order", "channel", "attempts", "decision", "reason"],
        [[d.work_order_id, d.channel, d.attempts, d.decision.value, d.reason] for d in plan.deliveries],
        empty="no failed deliveries",
    )
    out.say(", ".join(f"{plan.counts[d]} {d.value}" for d in Decision))


@click.group()
def notifications() -> None:
    """Work-order notifications (SNS, PagerDuty, Slack) that failed: plan and retry them.

    Escalation retries a failed channel while its event is redelivered; what still failed after
    that is here. For each failed delivery of an open or acknowledged work order the plan decides
    retry, wait (the backoff since the last attempt has not passed; until when) or suppress (the
    work order is acknowledged or resolved, the channel is gone, or the retries are used up).

    \b
    Examples:
      rebound notifications plan
      rebound notifications plan --retry-delay-minutes 1 --output json
      rebound notifications retry --yes
      rebound notifications retry --work-order-id WO_ID --channel slack --yes
    """


@notifications.command("plan")
@plan_options
@click.pass_obj
@authorized("notifications:read")
def plan(app: App, /, **kwargs: Any) -> None:
    """Decide retry, wait or suppress for each failed delivery, with the reason. Changes nothing.

    The wait after a delivery's first attempt is --retry-delay-minutes, multiplied by
    --backoff-multiplier for each retry since (escalation's own redeliveries count);
    --allow-immediate-retry skips the wait after a first failure. A delivery that has had
    --max-retry-attempts retries is suppressed.

    \b
    Examples:
      rebound notifications plan
      rebound notifications plan --max-retry-attempts 3 --retry-delay-minutes 10
      rebound notifications plan --work-order-id WO_ID --output json

    \b
    JSON fields: environment, generated_at, generated_by, retry_policy{max_retry_attempts,
    retry_delay_minutes, allow_immediate_retry, backoff_multiplier}, counts{retry, wait,
    suppress}, deliveries[] (work_order_id, work_order_state, severity, channel, decision,
    reason, attempts, last_attempt_at, last_detail, retry_at).
    """
    request = _request(kwargs)
    result = app.notifications().plan(request)
    out.emit(app, result.model_dump(mode="json"), lambda: _render_plan(result))


@notifications.command("retry")
@plan_options
@out.YES
@click.pass_obj
@authorized("notifications:retry", Environment())  # every tenant's work orders
def retry(app: App, /, yes: bool, **kwargs: Any) -> None:
    """Carry the plan out: send every delivery it says to retry, now.

    The plan is made again when this runs. Each attempt is recorded on its work order and
    audited as notification-retried, with you as the actor and --generated-by in the evidence.
    A channel that fails again stays failed, with one more attempt. Exits 1 if one failed.

    \b
    Examples:
      rebound notifications retry --yes
      rebound notifications retry --work-order-id WO_ID --channel pagerduty --yes
      rebound notifications retry --allow-immediate-retry --generated-by "incident 42" --yes

    \b
    JSON fields: plan (as `notifications plan`), retried[] (work_order_id, channel, status
    (delivered|failed), attempts, detail, recorded), delivered, failed.
    """
    request = _request(kwargs)
    ops = app.notifications(writer=True)
    due = ops.plan(request).counts[Decision.RETRY]
    if due:
        out.confirm(f"Send {due} failed notification(s) again now?", yes)
    result = ops.execute(request)

    def render() -> None:
        _render_plan(result.plan)
        out.table(
            "retried",
            ["work order", "channel", "status", "attempts", "detail"],
            [[r.work_order_id, r.channel, r.status.value, r.attempts, r.detail] for r in result.retried],
            empty="nothing to retry",
        )
        out.say(f"{result.delivered} delivered, {result.failed} failed")

    out.emit(app, result.model_dump(mode="json"), render)
    if result.failed:
        raise click.exceptions.Exit(EXIT_FAILED)
