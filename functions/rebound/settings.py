"""Settings of a Lambda function, read from its environment once at cold start and validated.

The names of the environment variables come from ``rebound.resources``; the CDK stack sets them
on AWS, and the local runtime sets the same ones.
"""

from __future__ import annotations

import importlib.resources
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from rebound import resources as r
from rebound.domain.approvals import ApprovalRules
from rebound.domain.errors import ConfigError
from rebound.domain.events import EventType
from rebound.domain.retention import Retention
from rebound.domain.target_specs import TargetRules


class QueueRef(BaseModel):
    model_config = ConfigDict(frozen=True)
    url: str
    arn: str
    name: str

    @classmethod
    def from_arn(cls, arn: str) -> QueueRef:
        """A queue's URL and name follow from its ARN (``arn:<partition>:sqs:<region>:<account>:<name>``).

        Lambda environments carry only the ARN: its whole environment must fit in 4 KB.
        """
        parts = arn.split(":")
        if len(parts) != 6 or parts[2] != "sqs":
            raise ValueError(f"not an SQS queue ARN: {arn!r}")
        partition, region, account, name = parts[1], parts[3], parts[4], parts[5]
        domain = "amazonaws.com.cn" if partition == "aws-cn" else "amazonaws.com"
        return cls(url=f"https://sqs.{region}.{domain}/{account}/{name}", arn=arn, name=name)


class Settings(BaseModel):
    model_config = ConfigDict(frozen=True)

    environment: str = Field(min_length=1)
    tables: dict[str, str]
    queues: dict[str, QueueRef]
    bus_name: str
    schedule_group: str
    scheduler_role_arn: str
    topic_arn: str | None = None
    pagerduty_secret: str | None = Field(
        default=None, description="SSM parameter or Secrets Manager ARN holding the PagerDuty routing key"
    )
    slack_secret: str | None = Field(
        default=None, description="SSM parameter or Secrets Manager ARN holding the Slack webhook URL"
    )
    sla_webhook_url: str | None = Field(
        default=None,
        pattern=r"^https?://[^?#]+$",
        description="base URL of the SLA-breach webhook (POST {url}/notifications/sla-breach)",
    )
    sla_webhook_secret: str | None = Field(
        default=None, description="SSM parameter or Secrets Manager ARN holding the webhook's HMAC key"
    )
    flags: str | None = Field(
        default=None,
        pattern=r"^appconfig:[^:]+:[^:]+:[^:]+:[^:]+$",
        description="where the feature flags live, appconfig:<application>:<environment>:<profile>:"
        "<deployment strategy> (AppConfig ids); none: every flag at its default",
    )
    completion_key: str | None = Field(
        default=None,
        description="SSM parameter or Secrets Manager ARN holding the key that signs completion "
        "tokens (asynchronous targets)",
    )
    event_source: str = r.SPEC.event_source
    tracing: bool = Field(
        default=False,
        description="X-Ray: the functions trace actively, and a run's messages and events carry its trace "
        "(rebound.domain.tracing)",
    )
    audit_key_id: str | None = Field(
        default=None,
        description="the KMS HMAC key (ARN or id) that keys the audit chain; None only in a resources "
        "document written before the chain was keyed, which cannot write audit records",
    )
    jitter_seed: int | None = None
    runbook_base_url: str = "docs/runbooks"
    health_expected_interval_minutes: int = Field(
        default=30, ge=1, description="the scheduled retry-health report's expected interval"
    )
    health_stale_metadata_minutes: int = Field(
        default=120, ge=1, description="the scheduled retry-health report's stale-metadata limit"
    )
    config_dir: Path
    deployed_policies: tuple[str, ...] | None = Field(
        default=None,
        description="the named retry policies bundled with this environment's functions (None: not "
        "recorded, an older deployment); with the policies stored at run time, all it knows",
    )

    approvals: ApprovalRules | None = Field(
        default=None, description="which actions need a second operator; None: the defaults (ApprovalRules)"
    )
    runs_by_task: Literal["by_task_keys", "by_task"] = Field(
        default="by_task_keys",
        description="the runs table's index a task's runs are read from: by_task while a stack upgrades "
        "(upgrade.keep_indexes), by_task_keys once it has dropped it",
    )
    targets: TargetRules | None = Field(
        default=None, description="what targets may do here; None: the defaults for the environment's name"
    )
    retention: Retention | None = Field(
        default=None,
        description="how long finished runs and runs' audit records stay in DynamoDB before TTL deletes "
        "them (rebound.domain.retention); None: nothing expires (a stack from before retention)",
    )
    archive_bucket: str | None = Field(
        default=None,
        description="the S3 bucket audit records are archived to as they are written (docs/archive.md); "
        "None: no archive (a stack from before it)",
    )
    publish_events: tuple[str, ...] = Field(
        default=(),
        description="detail types of Rebound's events announced on the bus although no rule of the "
        "stack consumes them (for subscribers of your own); '*' announces every event",
    )

    @field_validator("publish_events")
    @classmethod
    def _known_events(cls, values: tuple[str, ...]) -> tuple[str, ...]:
        return check_publish_events(values)

    def published_events(self) -> frozenset[str] | None:
        """The detail types the outbox carries (``None``: every one): those a rule of the stack
        consumes and those ``publish_events`` names."""
        if r.PUBLISH_ALL in self.publish_events:
            return None
        return r.consumed_detail_types() | frozenset(self.publish_events)

    tenant_secrets_role: str | None = Field(
        default=None,
        description="the role the executor assumes with the session tag rebound:tenant=<tenant> to read a "
        "task's secrets (AWS); None: read with the function's own role (the local cloud, which "
        "evaluates no IAM)",
    )
    identities: dict[str, list[str]] | None = Field(
        default=None,
        description="identity (IAM ARN, a role's ARN, or * for any caller) -> the tenants it may act on "
        "(* for all: an administrator), added to the grants stored in the control table "
        "(rebound.ops.access); None: not configured (a resources document written before tenancy), "
        "every caller is an administrator",
    )

    @property
    def target_rules(self) -> TargetRules:
        return self.targets if self.targets is not None else TargetRules.defaults_for(self.environment)

    def approval_rules(self) -> ApprovalRules:
        """The environment's ``approvals:`` (``rebound.domain.approvals``), its defaults if unset."""
        return self.approvals if self.approvals is not None else ApprovalRules()

    @field_validator("tables", mode="before")
    @classmethod
    def _current_table_names(cls, tables: Any) -> Any:
        """A resources document written before a table was renamed names it by its former name."""
        if not isinstance(tables, Mapping):
            return tables
        out = dict(tables)
        for former, logical in r.renamed_tables().items():
            if former in out and logical not in out:
                out[logical] = out.pop(former)
        return out

    def table(self, logical: str) -> str:
        return self.tables[logical]

    def queue(self, logical: str) -> QueueRef:
        return self.queues[logical]


def check_publish_events(values: tuple[str, ...]) -> tuple[str, ...]:
    """``values`` if each is ``*`` or the detail type of one of Rebound's own events."""
    known = {t.value for t in EventType}
    for value in values:
        if value != r.PUBLISH_ALL and value not in known:
            raise ValueError(
                f"{value!r} is not one of Rebound's events; use '*' or one of: {', '.join(sorted(known))}"
            )
    return values


def default_config_dir() -> Path:
    """The default task configuration (``default_policy.yaml``, ``retry-policies.yaml``).

    The package's own ``rebound/_config``, found with ``importlib.resources``: the wheel and the
    Lambda bundle both ship ``config/tasks`` there. In a checkout (an editable install), the
    checkout's ``config/tasks``. ``REBOUND_CONFIG_DIR`` overrides either (``settings_from_env``).
    """
    shipped = importlib.resources.files("rebound").joinpath("_config")
    if isinstance(shipped, Path) and shipped.is_dir():
        return shipped
    checkout = Path(__file__).resolve().parents[2] / "config" / "tasks"
    if checkout.is_dir():
        return checkout
    raise ConfigError(
        str(shipped), "", f"the package ships no task configuration; set {r.ENV_CONFIG_DIR} to a directory"
    )


def _json_or_none(env: Mapping[str, str], name: str) -> Any:
    raw = env.get(name)
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        raise ConfigError("environment", name, "is not valid JSON") from None


def settings_from_env(environ: Mapping[str, str] | None = None) -> Settings:
    env = os.environ if environ is None else environ
    missing: list[str] = []

    def need(name: str) -> str:
        value = env.get(name, "")
        if not value:
            missing.append(name)
        return value

    tables = {t.logical: need(t.env_var) for t in r.SPEC.tables}
    queues = {
        q.logical: QueueRef.from_arn(need(f"{q.env_prefix}_ARN") or "arn:aws:sqs:-:-:-")
        for q in r.SPEC.queues
    }
    data = {
        "environment": need(r.ENV_ENVIRONMENT),
        "tables": tables,
        "queues": queues,
        "bus_name": need(r.ENV_BUS),
        "schedule_group": need(r.ENV_SCHEDULE_GROUP),
        "scheduler_role_arn": need(r.ENV_SCHEDULER_ROLE),
        "topic_arn": env.get(r.ENV_TOPIC) or None,
        "pagerduty_secret": env.get(r.ENV_PAGERDUTY_SECRET) or None,
        "slack_secret": env.get(r.ENV_SLACK_SECRET) or None,
        "sla_webhook_url": env.get(r.ENV_SLA_WEBHOOK_URL) or None,
        "sla_webhook_secret": env.get(r.ENV_SLA_WEBHOOK_SECRET) or None,
        "flags": env.get(r.ENV_FLAGS) or None,
        "completion_key": env.get(r.ENV_COMPLETION_KEY) or None,
        "event_source": env.get(r.ENV_EVENT_SOURCE) or r.SPEC.event_source,
        "tracing": env.get(r.ENV_TRACING) == "1",
        "audit_key_id": need(r.ENV_AUDIT_KEY),
        "jitter_seed": env.get(r.ENV_JITTER_SEED) or None,
        "runbook_base_url": env.get(r.ENV_RUNBOOK_BASE) or "docs/runbooks",
        "health_expected_interval_minutes": env.get(r.ENV_HEALTH_EXPECTED_INTERVAL) or 30,
        "health_stale_metadata_minutes": env.get(r.ENV_HEALTH_STALE_METADATA) or 120,
        "config_dir": env.get(r.ENV_CONFIG_DIR) or default_config_dir(),
        "targets": _json_or_none(env, r.ENV_TARGET_RULES),
        "approvals": _json_or_none(env, r.ENV_APPROVALS),
        "runs_by_task": env.get(r.ENV_RUNS_BY_TASK) or r.RUNS_BY_TASK,
        "retention": _json_or_none(env, r.ENV_RETENTION),
        "archive_bucket": env.get(r.ENV_ARCHIVE_BUCKET) or None,
        "identities": _json_or_none(env, r.ENV_IDENTITIES),
        "tenant_secrets_role": env.get(r.ENV_TENANT_SECRETS_ROLE) or None,
        "publish_events": tuple(d.strip() for d in env.get(r.ENV_PUBLISH_EVENTS, "").split(",") if d.strip()),
    }
    if missing:
        raise ConfigError("environment", ", ".join(missing), "required variables are not set")
    try:
        return Settings.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ConfigError("environment", ".".join(map(str, first["loc"])), first["msg"]) from None


def settings_to_env(settings: Settings) -> dict[str, str]:
    """The environment that ``settings_from_env`` reads back into ``settings``."""
    out = {
        r.ENV_ENVIRONMENT: settings.environment,
        r.ENV_BUS: settings.bus_name,
        r.ENV_SCHEDULE_GROUP: settings.schedule_group,
        r.ENV_SCHEDULER_ROLE: settings.scheduler_role_arn,
        r.ENV_EVENT_SOURCE: settings.event_source,
        r.ENV_TRACING: "1" if settings.tracing else "0",
        r.ENV_RUNBOOK_BASE: settings.runbook_base_url,
        r.ENV_CONFIG_DIR: str(settings.config_dir),
        r.ENV_HEALTH_EXPECTED_INTERVAL: str(settings.health_expected_interval_minutes),
        r.ENV_HEALTH_STALE_METADATA: str(settings.health_stale_metadata_minutes),
    }
    if settings.topic_arn:
        out[r.ENV_TOPIC] = settings.topic_arn
    if settings.audit_key_id:
        out[r.ENV_AUDIT_KEY] = settings.audit_key_id
    if settings.pagerduty_secret:
        out[r.ENV_PAGERDUTY_SECRET] = settings.pagerduty_secret
    if settings.slack_secret:
        out[r.ENV_SLACK_SECRET] = settings.slack_secret
    if settings.sla_webhook_url:
        out[r.ENV_SLA_WEBHOOK_URL] = settings.sla_webhook_url
    if settings.sla_webhook_secret:
        out[r.ENV_SLA_WEBHOOK_SECRET] = settings.sla_webhook_secret
    if settings.flags:
        out[r.ENV_FLAGS] = settings.flags
    if settings.completion_key:
        out[r.ENV_COMPLETION_KEY] = settings.completion_key
    if settings.jitter_seed is not None:
        out[r.ENV_JITTER_SEED] = str(settings.jitter_seed)
    if settings.publish_events:
        out[r.ENV_PUBLISH_EVENTS] = ",".join(settings.publish_events)
    if settings.targets is not None:
        out[r.ENV_TARGET_RULES] = json.dumps(settings.targets.model_dump(mode="json"), separators=(",", ":"))
    if settings.approvals is not None:
        out[r.ENV_APPROVALS] = json.dumps(settings.approvals.model_dump(mode="json"), separators=(",", ":"))
    if settings.runs_by_task != r.RUNS_BY_TASK:
        out[r.ENV_RUNS_BY_TASK] = settings.runs_by_task
    if settings.retention is not None:
        out[r.ENV_RETENTION] = json.dumps(settings.retention.model_dump(mode="json"), separators=(",", ":"))
    if settings.archive_bucket:
        out[r.ENV_ARCHIVE_BUCKET] = settings.archive_bucket
    if settings.tenant_secrets_role:
        out[r.ENV_TENANT_SECRETS_ROLE] = settings.tenant_secrets_role
    if settings.identities is not None:
        out[r.ENV_IDENTITIES] = json.dumps(settings.identities, separators=(",", ":"), sort_keys=True)
    for spec in r.SPEC.tables:
        out[spec.env_var] = settings.tables[spec.logical]
    for q in r.SPEC.queues:
        ref = settings.queues[q.logical]
        out[f"{q.env_prefix}_ARN"] = ref.arn
    return out


def resources_document(settings: Settings) -> dict[str, Any]:
    """What the SSM resources parameter holds; the CLI rebuilds ``Settings`` from it."""
    return {
        "environment": settings.environment,
        "tables": settings.tables,
        "queues": {k: v.model_dump() for k, v in settings.queues.items()},
        "bus_name": settings.bus_name,
        "schedule_group": settings.schedule_group,
        "scheduler_role_arn": settings.scheduler_role_arn,
        "topic_arn": settings.topic_arn,
        "event_source": settings.event_source,
        "audit_key_id": settings.audit_key_id,
        "pagerduty_secret": settings.pagerduty_secret,
        "slack_secret": settings.slack_secret,
        "sla_webhook_url": settings.sla_webhook_url,
        "sla_webhook_secret": settings.sla_webhook_secret,
        "flags": settings.flags,
        "completion_key": settings.completion_key,
        "targets": settings.targets.model_dump(mode="json") if settings.targets is not None else None,
        "approvals": settings.approvals.model_dump(mode="json") if settings.approvals is not None else None,
        "runs_by_task": settings.runs_by_task,
        "retention": settings.retention.model_dump(mode="json") if settings.retention is not None else None,
        "archive_bucket": settings.archive_bucket,
        "identities": settings.identities,
        "publish_events": list(settings.publish_events),
        "deployed_policies": list(settings.deployed_policies)
        if settings.deployed_policies is not None
        else None,
    }


def settings_from_document(doc: dict[str, Any], config_dir: Path | None = None) -> Settings:
    """``doc`` as ``resources_document`` wrote it. A document without ``runs_by_task`` was written by
    a stack from before ``by_task_keys``: that stack lists a task's runs from ``by_task``."""
    earlier = {"runs_by_task": r.RUNS_BY_TASK_WHOLE}
    return Settings.model_validate({**earlier, **doc, "config_dir": config_dir or default_config_dir()})
