"""Environment configuration: ``config/environments/<env>.yaml``, validated by pydantic.

Each environment's file says where it differs: data retention, deletion protection, alarm
thresholds, log retention, who is alerted and what the functions may reach outside the stack.
A bad file fails synthesis with an error that names the file, the key path and the problem.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from rebound.config.loader import config_error, load_yaml
from rebound.domain.approvals import ApprovalRules
from rebound.domain.errors import ConfigError
from rebound.domain.retention import Retention
from rebound.domain.target_specs import TargetRules
from rebound.resources import SPEC
from rebound.settings import check_publish_events

ENVIRONMENT_NAME = r"^[a-z][a-z0-9-]{1,15}$"
# The retention values CloudWatch Logs accepts.
LOG_RETENTION_DAYS = frozenset(
    {1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653}
)
Percent = Annotated[float, Field(gt=0, le=100)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class AlarmThresholds(_Model):
    """Alarm thresholds. The rates default to the seeds' values (ARCHITECTURE.md, Telemetry)."""

    retry_failure_rate_percent: Percent = 15
    retry_failure_window_minutes: int = Field(10, ge=1, le=60)
    scheduling_failure_rate_percent: Percent = 5
    scheduling_failure_window_minutes: int = Field(5, ge=1, le=60)
    sla_consecutive_breaches: int = Field(3, ge=1, le=10)
    sla_period_minutes: int = Field(5, ge=1, le=60)
    lock_contention_percent: Percent = 70
    lock_contention_window_minutes: int = Field(5, ge=1, le=60)
    workorder_failures: int = Field(1, ge=1)
    retry_success_slo_percent: Percent = Field(90, description="retried attempts that succeed, over 1 h")
    on_time_slo_percent: Percent = Field(98, description="first attempts started within 60 s, over 1 h")
    execution_success_slo_percent: Percent = Field(97, description="attempts that succeed, over 1 h")
    slo_fast_window_minutes: int = Field(
        5, ge=1, le=30, description="the burn-rate alarms' short window: the SLO must still be broken now"
    )
    manual_recovery_completion_percent: Percent = Field(
        95, description="work orders opened in 7 days that were resolved, below which it alarms"
    )
    sweeper_failures: int = Field(1, ge=1, description="sweeper steps or items that failed in 5 minutes")
    dlq_depth: int = Field(ge=1, description="messages waiting in a dead-letter queue")
    dlq_oldest_age_s: int = Field(
        ge=300, le=13 * 86400, description="must leave time to act before retention"
    )
    execution_oldest_age_s: int = Field(ge=60, description="backlog on the execution queue")
    outbox_iterator_age_s: int = Field(ge=60, description="events waiting in the outbox stream")
    archive_iterator_age_s: int = Field(
        3600,
        ge=60,
        le=43200,
        description="audit records waiting in the audit table's stream to be archived (under half of "
        "the stream's 24 hours, so that someone acts while the sweeper can still archive them again)",
    )


class ApiConfig(_Model):
    throttle_rate_limit: float = Field(10, gt=0)
    throttle_burst_limit: int = Field(20, ge=1)
    # API Gateway execution logging needs the account-wide CloudWatch role. Set false when the
    # account has one already (another stack or a landing zone manages it).
    cloudwatch_role: bool = True


class OutboxConfig(_Model):
    """The relay's stream event source mapping."""

    retry_attempts: int = Field(100, ge=0, le=10000)
    max_record_age_s: int = Field(86400, ge=60, le=604800)
    publish: tuple[str, ...] = Field(
        (),
        description="detail types announced on the bus although no rule of the stack consumes them "
        "(for subscribers of your own, and the archive); '*' announces every event",
    )

    source: str = Field(
        SPEC.event_source,
        pattern=r"^[a-z0-9][a-z0-9-]*(\.[a-z0-9][a-z0-9-]*)+$",
        max_length=256,
        description="the source of every event Rebound publishes: reverse DNS "
        "(com.example.platform.rebound), not aws.*; the stack's rules, and a worker's reports, use it",
    )

    @field_validator("publish")
    @classmethod
    def _known_events(cls, values: tuple[str, ...]) -> tuple[str, ...]:
        return check_publish_events(values)

    @field_validator("source")
    @classmethod
    def _not_aws(cls, value: str) -> str:
        if value.startswith("aws."):
            raise ValueError("a source starting with 'aws.' is reserved for AWS services")
        return value


class GrantsConfig(_Model):
    """What the functions may reach outside this stack (task targets and notification secrets)."""

    target_function_arns: tuple[str, ...] = ()
    secret_parameter_path: str | None = Field(
        None, description="SSM path of target and channel secrets; default /rebound/<env>/secrets"
    )
    secrets_manager_arns: tuple[str, ...] = ()

    @field_validator("target_function_arns")
    @classmethod
    def _lambda_arns(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for arn in value:
            if not arn.startswith("arn:") or ":lambda:" not in arn or ":function:" not in arn:
                raise ValueError(f"{arn!r} is not a Lambda function ARN")
        return value

    @field_validator("secrets_manager_arns")
    @classmethod
    def _secret_arns(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for arn in value:
            if not arn.startswith("arn:") or ":secretsmanager:" not in arn:
                raise ValueError(f"{arn!r} is not a Secrets Manager secret ARN")
        return value

    @field_validator("secret_parameter_path")
    @classmethod
    def _path(cls, value: str | None) -> str | None:
        if value is not None and (not value.startswith("/") or value.endswith("/") or "*" in value):
            raise ValueError("must start with '/', not end with '/', and hold no '*'")
        return value


class HealthConfig(_Model):
    """The retry-health report the sweeper runs every five minutes (``rebound.engine.health.watch``)."""

    expected_interval_minutes: int = Field(30, ge=1, le=1440, description="how often the retry loop acts")
    stale_metadata_minutes: int = Field(120, ge=1, le=10080, description="how old retry bookkeeping may get")


class NotificationsConfig(_Model):
    """Work-order channels besides the alerts topic: an SSM parameter name or Secrets Manager ARN."""

    pagerduty_secret: str | None = None
    slack_secret: str | None = None
    sla_webhook_url: str | None = Field(
        None,
        pattern=r"^https://[^?#]+$",
        description="base URL of a receiver of SLA breaches: POST {url}/notifications/sla-breach, https only",
    )
    sla_webhook_secret: str | None = Field(
        None, description="the HMAC key the webhook's deliveries are signed with"
    )

    @field_validator("pagerduty_secret", "slack_secret", "sla_webhook_secret")
    @classmethod
    def _reference(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("/", "arn:")):
            raise ValueError("must be an SSM parameter name (/...) or an ARN")
        return value


ROLE_ARN = r"^arn:aws[a-z-]*:iam::\d{12}:role/[\w+=,.@/-]+$"


PRINCIPAL_ARN = r"^arn:aws[a-z-]*:iam::\d{12}:(root|role/[\w+=,.@/-]+|user/[\w+=,.@/-]+)$"


class AuditConfig(_Model):
    """Who besides the functions writes audit records: the roles operators run the CLI with
    (its recovery commands write audit records, which needs the audit key's ``GenerateMac``).
    And who may assume the read-only auditor role (``rebound audit verify --day-keys``: reads and
    ``VerifyMac`` only); none by default, and then the role is not created."""

    writer_roles: tuple[Annotated[str, Field(pattern=ROLE_ARN)], ...] = ()
    auditor_principals: tuple[Annotated[str, Field(pattern=PRINCIPAL_ARN)], ...] = ()


class VpcConfig(_Model):
    """Run the functions in these subnets of an existing VPC (for accounts that require it). The
    subnets need a route to DynamoDB, SQS, EventBridge, Scheduler, SNS, SSM, KMS and CloudWatch
    (VPC endpoints or a NAT gateway), and to whatever the tasks' targets call."""

    vpc_id: Annotated[str, Field(pattern=r"^vpc-[0-9a-f]{8,17}$")]
    availability_zones: tuple[Annotated[str, Field(pattern=r"^[a-z]{2}(-[a-z]+)+-\d[a-z]$")], ...] = Field(
        min_length=1
    )
    subnet_ids: tuple[Annotated[str, Field(pattern=r"^subnet-[0-9a-f]{8,17}$")], ...] = Field(min_length=1)
    security_group_ids: tuple[Annotated[str, Field(pattern=r"^sg-[0-9a-f]{8,17}$")], ...] = Field(
        min_length=1
    )

    @model_validator(mode="after")
    def _one_subnet_per_zone(self) -> VpcConfig:
        if len(self.subnet_ids) != len(self.availability_zones):
            raise ValueError("give one subnet id per availability zone, in the same order")
        return self


Units = Annotated[int, Field(ge=1, le=40000)]


class ScalingUnits(_Model):
    """The units a provisioned table and each of its indexes scale between, reads and writes apart."""

    min_read_units: Units = 1
    max_read_units: Units = 1000
    min_write_units: Units = 1
    max_write_units: Units = 1000

    @model_validator(mode="after")
    def _ordered(self) -> ScalingUnits:
        for kind in ("read", "write"):
            low, high = getattr(self, f"min_{kind}_units"), getattr(self, f"max_{kind}_units")
            if low > high:
                raise ValueError(f"min_{kind}_units ({low}) is above max_{kind}_units ({high})")
        return self


class TableUnits(_Model):
    """One table's own units (its indexes' too); what it leaves out is the environment's."""

    min_read_units: Units | None = None
    max_read_units: Units | None = None
    min_write_units: Units | None = None
    max_write_units: Units | None = None


class CapacityConfig(ScalingUnits):
    """How DynamoDB bills the tables. ``on_demand`` (the default): per request, nothing to plan, any
    burst absorbed. ``provisioned``: every table and index is provisioned, and Application Auto
    Scaling keeps its consumed capacity near ``target_utilization_percent`` between the minimum and
    the maximum units (``tables.<name>`` sets a table's own, for it and its indexes). For a steady
    load it costs about 40 % of on-demand per write at 70 % (docs/cost.md); a burst beyond the
    capacity and the burst credit (5 minutes of unused capacity) is throttled until scaling catches
    up (minutes), and the handlers retry throttled calls."""

    mode: Literal["on_demand", "provisioned"] = "on_demand"
    target_utilization_percent: int = Field(70, ge=20, le=90)
    tables: dict[str, TableUnits] = Field(default_factory=dict)

    @field_validator("tables")
    @classmethod
    def _known_tables(cls, value: dict[str, TableUnits]) -> dict[str, TableUnits]:
        known = [spec.logical for spec in SPEC.tables]
        unknown = sorted(set(value) - set(known))
        if unknown:
            raise ValueError(f"no such table: {', '.join(unknown)} (tables: {', '.join(known)})")
        return value

    @model_validator(mode="after")
    def _tables_ordered(self) -> CapacityConfig:
        for name in self.tables:
            try:
                self.units(name)
            except ValueError as exc:
                raise ValueError(f"tables.{name}: {exc}") from None
        return self

    def units(self, table: str) -> ScalingUnits:
        """The units ``table`` and its indexes scale between: its own where given, else these."""
        own = self.tables.get(table)
        merged = {field: getattr(self, field) for field in ScalingUnits.model_fields}
        merged.update(own.model_dump(exclude_none=True) if own is not None else {})
        try:
            return ScalingUnits(**merged)
        except ValidationError as exc:
            raise ValueError(
                "; ".join(str(e["msg"]).removeprefix("Value error, ") for e in exc.errors())
            ) from None


RETIRED_INDEXES = tuple(f"{t.logical}.{i.name}" for t in SPEC.tables for i in t.retired_indexes)


class UpgradeConfig(_Model):
    """What a stack deployed by an earlier version keeps while it moves to this one (docs/deploy.md,
    *Upgrading*)."""

    keep_indexes: tuple[str, ...] = Field(
        (),
        description="indexes of an earlier layout (<table>.<index>) to keep, and read, beside their "
        "replacement: DynamoDB builds or drops one index per table update, so a replaced index takes "
        "one deploy that keeps it and one that drops it",
    )

    @field_validator("keep_indexes")
    @classmethod
    def _retired(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        unknown = [v for v in value if v not in RETIRED_INDEXES]
        if unknown:
            raise ValueError(
                f"{', '.join(unknown)}: not an index an earlier layout had; "
                f"the ones there are: {', '.join(RETIRED_INDEXES) or 'none'}"
            )
        return value


class RetentionConfig(Retention):
    """How long runs and audit records stay in DynamoDB, and how the archive keeps them after
    (docs/archive.md). The archive bucket itself is retained when the stack is deleted."""

    object_lock_days: int | None = Field(
        None,
        ge=1,
        le=36500,
        description="S3 Object Lock in compliance mode on the audit archive: no one, the account's root "
        "included, can delete or overwrite an archived object for this many days (none: no lock). It "
        "can be set only when the bucket is created (a first deploy), and never shortened or removed",
    )

    def retention(self) -> Retention:
        return Retention(runs_days=self.runs_days, audit_days=self.audit_days)


class EnvironmentConfig(_Model):
    name: Annotated[str, Field(pattern=ENVIRONMENT_NAME)]
    account: Annotated[str, Field(pattern=r"^\d{12}$")] | None = None
    region: Annotated[str, Field(pattern=r"^[a-z]{2}(-[a-z]+)+-\d$")] | None = None
    retain_data: bool
    deletion_protection: bool
    termination_protection: bool = False
    log_retention_days: int = 30
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    bus_archive_retention_days: int = Field(7, ge=1, le=3650)
    tracing: bool = Field(
        False,
        description="X-Ray active tracing on every function, and one trace per run across its messages "
        "and events (docs/architecture/telemetry.md); X-Ray bills each trace recorded",
    )
    runbook_base_url: str = "docs/runbooks"
    alarm_emails: tuple[Annotated[str, Field(pattern=r"^[^@\s]+@[^@\s]+\.[^@\s]+$")], ...] = ()
    alarms: AlarmThresholds
    api: ApiConfig = ApiConfig()
    outbox: OutboxConfig = OutboxConfig()
    grants: GrantsConfig = GrantsConfig()
    notifications: NotificationsConfig = NotificationsConfig()
    health: HealthConfig = HealthConfig()
    approvals: ApprovalRules | None = Field(
        None, description="which actions need a second operator (four eyes); default: ApprovalRules()"
    )
    targets: TargetRules | None = Field(
        None, description="what task targets may do here; default: TargetRules.defaults_for(name)"
    )
    tags: dict[str, str] = Field(default_factory=dict)
    encryption: Literal["aws_managed", "cmk"] = Field(
        "aws_managed",
        description="aws_managed: AWS owned or managed keys; cmk: one customer-managed KMS key (rotation "
        "on) for the tables, queues, log groups and the alerts topic",
    )
    audit: AuditConfig = AuditConfig()
    capacity: CapacityConfig = CapacityConfig()
    upgrade: UpgradeConfig = UpgradeConfig()
    retention: RetentionConfig = RetentionConfig()
    vpc: VpcConfig | None = None
    identities: dict[str, tuple[str, ...]] = Field(
        default_factory=dict,
        description="IAM ARN (a user, a role: every session of it, or * for any caller) -> the tenants it "
        "may act on through the ops API, the CLI and the console (* for all tenants: an administrator, "
        "who may also `rebound tenants grant`); empty: only stored grants, so list one administrator",
    )

    @field_validator("log_retention_days")
    @classmethod
    def _retention(cls, value: int) -> int:
        if value not in LOG_RETENTION_DAYS:
            allowed = ", ".join(str(v) for v in sorted(LOG_RETENTION_DAYS))
            raise ValueError(f"CloudWatch Logs does not accept {value} days; use one of {allowed}")
        return value

    @model_validator(mode="after")
    def _protected_data_is_retained(self) -> EnvironmentConfig:
        if self.deletion_protection and not self.retain_data:
            raise ValueError(
                "deletion_protection needs retain_data: true (a protected table cannot be destroyed)"
            )
        return self

    @property
    def stack_name(self) -> str:
        return f"Rebound-{self.name}"

    @property
    def secret_path(self) -> str:
        return self.grants.secret_parameter_path or f"/rebound/{self.name}/secrets"


def load_environment(name: str, directory: Path) -> EnvironmentConfig:
    """Read and validate ``<directory>/<name>.yaml``; its ``name`` must match the file name."""
    path = directory / f"{name}.yaml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in directory.glob("*.yaml"))) or "none"
        raise ConfigError(str(path), "", f"no such environment file (environments: {known})")
    data = load_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError(str(path), "", "expected a mapping at the top level")
    try:
        config = EnvironmentConfig.model_validate(data)
    except ValidationError as exc:
        raise config_error(str(path), exc) from None
    if config.name != name:
        raise ConfigError(str(path), "name", f"is {config.name!r} but the file is {name}.yaml")
    return config


def environment_names(directory: Path) -> list[str]:
    return sorted(p.stem for p in directory.glob("*.yaml"))
