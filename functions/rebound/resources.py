"""The one definition of Rebound's AWS resources.

The CDK stack (``infra/rebound_infra``) and the local cloud (``localcloud/rebound_local``) both
build from these specs, and the DynamoDB store reads its key names from them, so production,
tests and the laptop cannot drift apart. Nothing here imports boto3 or CDK.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Literal

KeyType = Literal["S", "N"]


@dataclass(frozen=True)
class Key:
    name: str
    type: KeyType = "S"


@dataclass(frozen=True)
class Index:
    name: str
    partition: Key
    sort: Key | None = None
    projection: Literal["ALL", "KEYS_ONLY"] = "ALL"
    """What an entry holds: the whole item, or its keys alone. A keys-only entry is written once,
    when the item is, and again only if a key of the index changes."""


@dataclass(frozen=True)
class TableSpec:
    logical: str
    partition: Key
    sort: Key | None = None
    indexes: tuple[Index, ...] = ()
    retired_indexes: tuple[Index, ...] = ()
    """Indexes of an earlier layout that a stack deployed before keeps while it upgrades: built only
    in an environment whose ``upgrade.keep_indexes`` names them (``<table>.<index>``), and read
    instead of their replacement until the next deploy drops them (docs/deploy.md, *Upgrading*).
    DynamoDB adds or removes one index per table update, so a replacement takes two deploys."""
    ttl_attribute: str | None = None
    stream: Literal["NEW_IMAGE", "NEW_AND_OLD_IMAGES"] | None = None
    append_only: bool = False
    purpose: str = ""
    formerly: str | None = None
    """The logical name this table had before a rename. The stack keeps building it under that
    construct id, so CloudFormation keeps the same table (same logical id, same physical table,
    every item in place): a rename moves no data."""

    @property
    def env_var(self) -> str:
        return f"REBOUND_TABLE_{self.logical.upper()}"

    def built_indexes(self, keep: Collection[str] = ()) -> tuple[Index, ...]:
        """The indexes a stack builds: the spec's, and the retired ones ``keep`` names."""
        return self.indexes + tuple(i for i in self.retired_indexes if f"{self.logical}.{i.name}" in keep)

    @property
    def construct_id(self) -> str:
        return self.formerly or self.logical


@dataclass(frozen=True)
class QueueSpec:
    logical: str
    visibility_timeout_s: int = 30
    retention_s: int = 4 * 86400
    dead_letter: str | None = None
    max_receive_count: int | None = None
    receive_wait_s: int = 0
    purpose: str = ""

    @property
    def env_prefix(self) -> str:
        return f"REBOUND_QUEUE_{self.logical.upper()}"


@dataclass(frozen=True)
class FunctionSpec:
    logical: str
    handler: str
    timeout_s: int
    memory_mb: int = 256
    queue: str | None = None
    batch_size: int = 10
    max_concurrency: int | None = None
    stream_table: str | None = None
    batch_window_s: int = 0
    """How long an event source mapping gathers records before it invokes with fewer than
    ``batch_size`` (``MaximumBatchingWindowInSeconds``)."""
    every_minute: bool = False
    purpose: str = ""


@dataclass(frozen=True)
class RuleSpec:
    logical: str
    detail_types: tuple[str, ...]
    queue: str
    purpose: str = ""


@dataclass(frozen=True)
class ResourceSpec:
    tables: tuple[TableSpec, ...]
    queues: tuple[QueueSpec, ...]
    functions: tuple[FunctionSpec, ...]
    rules: tuple[RuleSpec, ...]
    bus_logical: str = "bus"
    schedule_group_logical: str = "schedules"
    topic_logical: str = "alerts"
    archive_bucket_logical: str = "archive"
    """The S3 bucket that keeps audit records after they expire from DynamoDB (docs/archive.md)."""
    event_source: str = "io.rebound"
    """The default ``source`` of Rebound's events (reverse DNS, as EventBridge asks of custom
    sources); an environment names its own with ``outbox.source``."""
    extra: dict[str, str] = field(default_factory=dict)

    def table(self, logical: str) -> TableSpec:
        return next(t for t in self.tables if t.logical == logical)

    def queue(self, logical: str) -> QueueSpec:
        return next(q for q in self.queues if q.logical == logical)

    def function(self, logical: str) -> FunctionSpec:
        return next(f for f in self.functions if f.logical == logical)


# Executor timeout drives the execution queue's visibility timeout: AWS recommends >= 6x.
# An attempt runs inside one executor invocation, so the longest task timeout (MAX_TASK_TIMEOUT_S
# in rebound.domain.basics, 270 s) plus a safety margin must fit in it.
EXECUTOR_TIMEOUT_S = 300
EXECUTION_VISIBILITY_S = 6 * EXECUTOR_TIMEOUT_S
HANDLER_TIMEOUT_S = 60
MAX_RECEIVE_COUNT = 5
DLQ_RETENTION_S = 14 * 86400
# API Gateway ends an integration after 29 s; the ops API answers within that.
OPS_API_TIMEOUT_S = 29
OPS_API_FUNCTION = "ops_api"

RECORD_TTL = "ttl"
"""The attribute DynamoDB's TTL deletes a run or an audit record by (epoch seconds): storage alone,
never part of the record (``rebound.adapters.dynamo.codec.from_item`` leaves it out), short
because every byte of an item is billed."""
TASKS = TableSpec(
    "tasks",
    Key("task_id"),
    indexes=(Index("by_tenant", Key("tenant"), Key("task_id")),),
    purpose="task definitions and their state (active or paused)",
)
RUNS_BY_TASK = "by_task_keys"
"""A task's runs by schedule time, keys alone: one write a run, at its claim (a page of a task's
runs is this query and a ``BatchGetItem`` of the runs)."""
RUNS_BY_TASK_WHOLE = "by_task"
"""The same, with whole runs: every change of a run rewrote its entry. A stack deployed before
2026-11-29 has it; ``upgrade.keep_indexes: [runs.by_task]`` keeps it, and reads it, while the new
one builds."""
RUNS = TableSpec(
    "runs",
    Key("run_id"),
    indexes=(
        Index(RUNS_BY_TASK, Key("task_id"), Key("scheduled_for"), projection="KEYS_ONLY"),
        Index("by_state", Key("state"), Key("updated_at")),
    ),
    retired_indexes=(Index(RUNS_BY_TASK_WHOLE, Key("task_id"), Key("scheduled_for")),),
    ttl_attribute=RECORD_TTL,
    purpose="the run ledger: one item per logical run, with its attempts; a finished run expires "
    "after retention.runs_days (its audit chain, archived, keeps it)",
)
AUDIT = TableSpec(
    "audit",
    Key("subject"),
    Key("seq", "N"),
    append_only=True,
    ttl_attribute=RECORD_TTL,
    stream="NEW_IMAGE",
    purpose="append-only hash chains, one per run, work order, task or policy; a run's records "
    "expire after retention.audit_days, archived to S3 from the stream when written",
)
OUTBOX = TableSpec(
    "outbox",
    Key("event_id"),
    ttl_attribute="expires_at",
    stream="NEW_IMAGE",
    purpose="events written in the same transaction as the state change they describe",
)
WORKORDERS = TableSpec(
    "workorders",
    Key("work_order_id"),
    indexes=(Index("by_state", Key("state"), Key("opened_at")),),
    purpose="one work order per dead-lettered run",
)
CONTROL = TableSpec(
    "control",
    Key("pk"),
    ttl_attribute="expires_at",
    purpose="control records: idempotency keys, concurrency slots, ledger watermarks, heartbeats, "
    "SLA streaks, the tasks epoch; keys expire by TTL",
    formerly="idempotency",
)
POLICIES = TableSpec(
    "policies",
    Key("name"),
    Key("version", "N"),
    purpose="versioned retry policies changed at run time",
)
TENANTS = TableSpec(
    "tenants",
    Key("tenant"),
    purpose="per-tenant settings: the cap on concurrent runs",
)

DLQ_MESSAGES = TableSpec(
    "dlq_messages",
    Key("message_id"),
    indexes=(
        Index("by_status", Key("status"), Key("dlq_at")),
        Index("by_task", Key("dlq_task"), Key("dlq_at")),
    ),
    ttl_attribute="expires_at",
    purpose="the record of the execution DLQ: one item per message, written where it arrives, so "
    "that listing, showing and counting the DLQ never receives (and hides) a message",
)
"""Why a table of its own rather than an item family in ``control``: its items need two indexes
ordered by time (``dlq_at`` is ``<at>#<message id>``) that no control record wants; its writers
(the dead-letter paths) need no right on the control records; and its retention follows the
DLQ's, not an idempotency key's. ``by_status`` lists what is ``in_dlq`` (the other statuses
are their own partitions); ``by_task`` is sparse: ``dlq_task`` is set only while the message is
in the DLQ, so a task's list never reads what has left."""

EXECUTION_DLQ = QueueSpec(
    "dlq", retention_s=DLQ_RETENTION_S, purpose="runs that exhausted or refused retries"
)
EXECUTION = QueueSpec(
    "execution",
    visibility_timeout_s=EXECUTION_VISIBILITY_S,
    retention_s=4 * 86400,
    dead_letter="dlq",
    max_receive_count=MAX_RECEIVE_COUNT,
    purpose="the delay queue: schedule fires and retries (DelaySeconds <= 900)",
)
CONTROL_DLQ = QueueSpec(
    "control_dlq", retention_s=DLQ_RETENTION_S, purpose="events the handlers could not process"
)
RETRY = QueueSpec(
    "retry",
    visibility_timeout_s=6 * HANDLER_TIMEOUT_S,
    dead_letter="control_dlq",
    max_receive_count=MAX_RECEIVE_COUNT,
    purpose="task.execution.failed events for the retry scheduler",
)
ESCALATION = QueueSpec(
    "escalation",
    visibility_timeout_s=6 * HANDLER_TIMEOUT_S,
    dead_letter="control_dlq",
    max_receive_count=MAX_RECEIVE_COUNT,
    purpose="task.dead_lettered events for escalation",
)
SCHEDULER_DLQ = QueueSpec(
    "scheduler_dlq", retention_s=DLQ_RETENTION_S, purpose="schedule invocations Scheduler could not deliver"
)

SPEC = ResourceSpec(
    tables=(
        TASKS,
        RUNS,
        AUDIT,
        OUTBOX,
        WORKORDERS,
        CONTROL,
        POLICIES,
        TENANTS,
        DLQ_MESSAGES,
        TableSpec(
            "dlq_archive",
            Key("message_id"),
            ttl_attribute="expires_at",
            purpose="DLQ messages kept beyond SQS retention (rebound dlq archive), redrivable from here",
        ),
    ),
    queues=(EXECUTION_DLQ, EXECUTION, CONTROL_DLQ, RETRY, ESCALATION, SCHEDULER_DLQ),
    functions=(
        FunctionSpec(
            "executor",
            "rebound.handlers.executor.lambda_handler",
            EXECUTOR_TIMEOUT_S,
            512,
            queue="execution",
            batch_size=5,
            max_concurrency=100,
            purpose="claims and runs attempts",
        ),
        FunctionSpec(
            "retry_scheduler",
            "rebound.handlers.retry_scheduler.lambda_handler",
            HANDLER_TIMEOUT_S,
            queue="retry",
            batch_size=10,
            max_concurrency=10,
            purpose="retries or dead-letters failed runs",
        ),
        FunctionSpec(
            "escalation",
            "rebound.handlers.escalation.lambda_handler",
            HANDLER_TIMEOUT_S,
            queue="escalation",
            batch_size=10,
            max_concurrency=5,
            purpose="opens work orders and notifies",
        ),
        FunctionSpec(
            "outbox_relay",
            "rebound.handlers.outbox_relay.lambda_handler",
            HANDLER_TIMEOUT_S,
            stream_table="outbox",
            batch_size=50,
            purpose="publishes outbox events to the bus",
        ),
        FunctionSpec(
            "archiver",
            "rebound.handlers.archiver.lambda_handler",
            HANDLER_TIMEOUT_S,
            stream_table="audit",
            batch_size=1000,
            batch_window_s=300,
            purpose="archives audit records to S3 as they are written, before TTL expires them",
        ),
        FunctionSpec(
            "sweeper",
            "rebound.handlers.sweeper.lambda_handler",
            HANDLER_TIMEOUT_S * 4,
            512,
            every_minute=True,
            purpose="expired leases, stale plans, DLQ arrivals without a work order",
        ),
        FunctionSpec(
            OPS_API_FUNCTION,
            "rebound.handlers.ops_api.lambda_handler",
            OPS_API_TIMEOUT_S,
            purpose="the operations API behind API Gateway (IAM authorization)",
        ),
    ),
    rules=(
        RuleSpec(
            "failed_runs", ("task.execution.failed",), "retry", "failed attempts go to the retry scheduler"
        ),
        RuleSpec("dead_letters", ("task.dead_lettered",), "escalation", "dead letters open work orders"),
        RuleSpec(
            "task_reports",
            ("rebound.task.heartbeat", "rebound.task.completed", "rebound.task.failed"),
            "retry",
            "asynchronous attempts' heartbeats and completions go to the retry queue's consumer",
        ),
        RuleSpec(
            "sla_breaches",
            ("task.sla.breached",),
            "escalation",
            "SLA breaches notify; the third in a row opens a work order",
        ),
        RuleSpec(
            "recoveries",
            ("task.recovered", "workorder.resolved"),
            "escalation",
            "a recovered run resolves its work order; a resolution notifies every channel",
        ),
        RuleSpec(
            "workstreams",
            (
                "workstream.step.ended",
                "workstream.failed",
                "workstream.dependency_cycle_detected",
                "workstream.resource_exhausted",
            ),
            "escalation",
            "a step's end advances its workstream; a failed workstream opens a critical work order",
        ),
    ),
)

ENV_ENVIRONMENT = "REBOUND_ENV"
ENV_BUS = "REBOUND_BUS_NAME"
ENV_SCHEDULE_GROUP = "REBOUND_SCHEDULE_GROUP"
ENV_SCHEDULER_ROLE = "REBOUND_SCHEDULER_ROLE_ARN"
ENV_TOPIC = "REBOUND_TOPIC_ARN"
ENV_EVENT_SOURCE = "REBOUND_EVENT_SOURCE"
ENV_TRACING = "REBOUND_TRACING"
ENV_JITTER_SEED = "REBOUND_JITTER_SEED"
ENV_RUNBOOK_BASE = "REBOUND_RUNBOOK_BASE_URL"
ENV_CONFIG_DIR = "REBOUND_CONFIG_DIR"
ENV_PAGERDUTY_SECRET = "REBOUND_PAGERDUTY_SECRET"
ENV_SLACK_SECRET = "REBOUND_SLACK_SECRET"
ENV_SLA_WEBHOOK_URL = "REBOUND_SLA_WEBHOOK_URL"
ENV_SLA_WEBHOOK_SECRET = "REBOUND_SLA_WEBHOOK_SECRET"
ENV_APPROVALS = "REBOUND_APPROVALS"
ENV_RUNS_BY_TASK = "REBOUND_RUNS_BY_TASK"
"""Which actions need a second operator (``Settings.approvals``), as JSON."""
ENV_FLAGS = "REBOUND_FLAGS"
"""Where the feature flags live (``Settings.flags``)."""
ENV_HEALTH_EXPECTED_INTERVAL = "REBOUND_HEALTH_EXPECTED_INTERVAL_MINUTES"
ENV_HEALTH_STALE_METADATA = "REBOUND_HEALTH_STALE_METADATA_MINUTES"
ENV_COMPLETION_KEY = "REBOUND_COMPLETION_KEY"
ENV_TARGET_RULES = "REBOUND_TARGET_RULES"
ENV_TENANT_SECRETS_ROLE = "REBOUND_TENANT_SECRETS_ROLE_ARN"
"""The role the executor assumes, tagged with a task's tenant, to read that tenant's secrets."""
ENV_IDENTITIES = "REBOUND_IDENTITIES"
"""The environment's identities -> tenants (``rebound.ops.access``), as JSON."""
ENV_PUBLISH_EVENTS = "REBOUND_PUBLISH_EVENTS"
"""Detail types announced on the bus besides those a rule of ``SPEC.rules`` consumes (comma
separated; ``*``: every event). See ``consumed_detail_types``."""
PUBLISH_ALL = "*"
ENV_ARCHIVE_BUCKET = "REBOUND_ARCHIVE_BUCKET"
"""The S3 bucket audit records are archived to (``rebound.adapters.audit_archive``)."""
ENV_RETENTION = "REBOUND_RETENTION"
"""How long runs and audit records stay in DynamoDB (``rebound.domain.retention``), as JSON."""
ENV_AUDIT_KEY = "REBOUND_AUDIT_KEY_ARN"
"""The KMS HMAC key that keys the audit chain (``rebound.adapters.audit_keys``)."""


def consumed_detail_types(spec: ResourceSpec = SPEC) -> frozenset[str]:
    """The detail types a rule of the stack delivers to one of Rebound's queues: the events the
    outbox must carry. An event no rule consumes (``task.execution.updated``) is written to the
    outbox only where the environment asks for it (``ENV_PUBLISH_EVENTS``)."""
    return frozenset(detail for rule in spec.rules for detail in rule.detail_types)


def completion_key_parameter(env: str) -> str:
    """Where the local cloud keeps an environment's completion key (an SSM SecureString)."""
    return f"/rebound/{env}/completion-key"


def renamed_tables() -> dict[str, str]:
    """Former logical table names -> today's (a resources document or local state written before
    a rename still reads)."""
    return {spec.formerly: spec.logical for spec in SPEC.tables if spec.formerly}


def resources_parameter(env: str) -> str:
    """The SSM parameter that records every resource name of an environment, for the CLI."""
    return f"/rebound/{env}/resources"


def service_name(logical: str) -> str:
    """A function's one service name, in its logs (Powertools ``service``) and its metrics (the
    ``service`` dimension) alike: ``retry_scheduler`` -> ``rebound-retry-scheduler``."""
    return f"rebound-{logical.replace('_', '-')}"


def local_name(env: str, logical: str) -> str:
    """Physical names on the local cloud (on AWS, CloudFormation names them)."""
    return f"rebound-{env}-{logical.replace('_', '-')}"
