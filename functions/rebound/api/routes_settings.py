"""Routes for policies (list, show with version history, set with per-field validation errors,
what-if), audit verification and retry health."""

from __future__ import annotations

from typing import Annotated, Any

from aws_lambda_powertools.event_handler.openapi.params import Query
from pydantic import BaseModel, Field

from rebound.api.app import Api
from rebound.engine.health.checks import HealthChecks
from rebound.engine.health.report import RetryHealthQuery
from rebound.ops.audit import AuditOps
from rebound.ops.authz import Environment, Rule, rule
from rebound.ops.common import validated
from rebound.ops.flags import FlagOps
from rebound.ops.notifications import DeliveryRetryRequest, NotificationOps
from rebound.ops.policies import PolicyOps, policy_view, whatif_window


class PolicyUpdate(BaseModel):
    changes: dict[str, Any] = Field(description='policy fields to change, e.g. {"max_attempts": 5}')
    dry_run: bool = Field(default=False, description="validate and show the diff, store nothing")


class PolicyWhatIf(BaseModel):
    changes: dict[str, Any] = Field(
        min_length=1, description='the proposed policy fields, e.g. {"max_attempts": 5}'
    )
    since: str = Field(default="7d", description="how far back to replay recorded failures: 1m to 30d")


class FlagChange(BaseModel):
    on: bool = Field(description="the flag's new value")
    reason: str | None = Field(default=None, max_length=500, description="why, for the audit record")


class Verify(BaseModel):
    target: str = Field(min_length=1, description="a run id, or a subject such as workorder#wo-...")


def register(api: Api) -> None:
    def policies() -> PolicyOps:
        return PolicyOps(api.deps(), api.caller.actor)

    @api.get("/flags", rule("flags:read"), summary="The environment's feature flags and what each switches")
    def list_flags() -> list[dict[str, Any]]:
        return FlagOps(api.deps(), api.caller.actor).list()

    @api.put(
        "/flags/<name>",
        Rule("flags:write", Environment()),
        summary="Turn a feature flag on or off (a new AppConfig version, audited)",
    )
    def set_flag(name: str, body: FlagChange) -> dict[str, Any]:
        return FlagOps(api.deps(), api.caller.actor).set(name, body.on, body.reason)

    @api.get(
        "/policies", rule("policies:read"), summary="Retry policies, as the next retry decision uses them"
    )
    def list_policies() -> list[dict[str, Any]]:
        return [policy_view(p) for p in policies().find()]

    @api.get("/policies/<name>", rule("policies:read"), summary="A policy with its version history")
    def show_policy(name: str) -> dict[str, Any]:
        return policies().show(name).as_dict()

    @api.put(
        "/policies/<name>",
        Rule("policies:write", Environment()),
        summary="Change a policy: a new version the next retry uses",
    )
    def set_policy(name: str, body: PolicyUpdate) -> dict[str, Any]:
        ops = policies()
        change = ops.plan(name, body.changes)
        if body.dry_run:
            return {"dry_run": True, "change": change.as_dict()}
        saved = ops.set(change)
        return {"dry_run": False, "change": change.as_dict(), "policy": policy_view(saved)}

    @api.post(
        "/policies/<name>/whatif",
        rule("policies:read"),
        summary="Replay the recorded failures of the policy's runs under proposed values (stores nothing)",
    )
    def policy_whatif(name: str, body: PolicyWhatIf) -> dict[str, Any]:
        since = whatif_window(body.since)
        return policies().whatif(name, body.changes, since).model_dump(mode="json")

    @api.post("/audit/verify", Rule("audit:verify", Environment()), summary="Verify one audit chain")
    def verify(body: Verify) -> dict[str, Any]:
        return AuditOps(api.deps()).verify(body.target).as_dict()

    @api.get(
        "/health/retry",
        rule("health:read"),
        summary="Retry health: worker, stale plans, ack gaps, failures, schedules",
    )
    def retry_health(
        expected_interval_minutes: Annotated[int, Query(description="retry worker limit (minutes)")] = 30,
        stale_metadata_minutes: Annotated[
            int, Query(description="stale plan and replay limit (minutes)")
        ] = 120,
        generated_by: Annotated[str | None, Query(description="who or what asked; echoed")] = None,
    ) -> dict[str, Any]:
        query = validated(
            RetryHealthQuery,
            {
                "expected_interval_minutes": expected_interval_minutes,
                "stale_metadata_minutes": stale_metadata_minutes,
                "generated_by": generated_by,
            },
        )
        return HealthChecks(api.deps()).retry_health(query).as_dict()

    @api.post(
        "/notifications/retry-plan",
        rule("notifications:read"),
        summary="For each failed delivery: retry, wait or suppress, and why",
    )
    def retry_plan(body: DeliveryRetryRequest) -> dict[str, Any]:
        return NotificationOps(api.deps(), api.caller.actor).plan(body).model_dump(mode="json")

    @api.post(
        "/notifications/retry-plan/execute",
        Rule("notifications:retry", Environment()),
        summary="Carry out the delivery-retry plan, audited",
    )
    def retry_plan_execute(body: DeliveryRetryRequest) -> dict[str, Any]:
        ops = NotificationOps(api.deps(), api.caller.actor)
        return ops.execute(body).model_dump(mode="json")
