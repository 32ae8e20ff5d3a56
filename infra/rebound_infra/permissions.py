"""What each function may do, granted with ``grant_*`` on the resources themselves.

Read from the code each handler runs (``rebound.engine`` and ``rebound.adapters``):

- ``DynamoStore`` reads with GetItem and Query and writes only through ``TransactWriteItems``
  made of conditional Puts, which IAM authorizes as ``dynamodb:PutItem`` per item. The
  control records (idempotency keys) are also put and deleted directly (``claim_key``, ``release_key``).
- The audit table gets Put and reads, never Update or Delete (it is append-only).
- The DLQ's record (``dlq_messages``) is written where messages reach the DLQ: every function
  that dead-letters puts its records (in the dead letter's transaction, or a conditional put
  when that transaction lost). The sweeper's DLQ check also reads records in batches and marks
  the second copies it removes (updates). Nobody deletes a record: they expire by TTL.
- Event source mappings grant their own consume rights (SQS) and stream reads (DynamoDB).

Keep this table in step with the engine: a new AWS call needs a line here, and the infra tests
fail on a right that no function should have.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from aws_cdk import Stack
from aws_cdk import aws_dynamodb as ddb
from aws_cdk import aws_events as events
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from rebound import resources as r
from rebound_infra.constructs.scheduling import Scheduling
from rebound_infra.nag import acknowledge, resource_finding

READ = ("dynamodb:GetItem", "dynamodb:Query")
# ``PolicyService`` lists the stored policy names (a Scan) to explain an unknown policy name.
POLICY_READ = (*READ, "dynamodb:Scan")
PUT = ("dynamodb:PutItem",)
DELETE = ("dynamodb:DeleteItem",)
# Concurrency slots and SLA counters change with ADD/DELETE updates (``rebound.engine.concurrency``).
UPDATE = ("dynamodb:UpdateItem",)
# The run ledger reads the runs a minute's fires should have created in one BatchGetItem, and
# lists the tasks (a Scan, cached for a minute).
LEDGER_RUNS = (*READ, "dynamodb:BatchGetItem")
TASK_LIST = (*READ, "dynamodb:Scan")
# The sweeper's DLQ check reads the records of what it received (BatchGetItem), records what it
# found without one (PutItem) and marks the second copies it removes (UpdateItem).
DLQ_CHECK = ("dynamodb:BatchGetItem", *PUT, *UPDATE)
APPEND_ONLY_FORBIDDEN = frozenset(
    {
        "dynamodb:UpdateItem",
        "dynamodb:DeleteItem",
        "dynamodb:BatchWriteItem",
        "dynamodb:PartiQLUpdate",
        "dynamodb:PartiQLDelete",
        "dynamodb:DeleteTable",
        "dynamodb:UpdateTable",
        "dynamodb:*",
    }
)


@dataclass(frozen=True)
class Access:
    tables: dict[str, tuple[str, ...]] = field(default_factory=dict)
    send: tuple[str, ...] = ()
    receive: tuple[str, ...] = ()
    put_events: bool = False
    create_schedules: bool = False
    publish_alerts: bool = False
    target_secrets: bool = False
    invoke_targets: bool = False
    notification_secrets: bool = False
    stream_reader: bool = False
    queue_attributes: tuple[str, ...] = ()
    """Queues whose counts it reads (GetQueueAttributes) without sending or receiving."""
    list_schedules: bool = False
    completion_key: bool = False
    """Reads the key of completion tokens: to sign them (executor) or check reports (the rest)."""


# The run path writes a run, its audit record and its outbox events in one transaction; a dead
# letter also writes the record of its DLQ message.
_RUN_WRITES = {
    "runs": READ + PUT,
    "audit": READ + PUT,
    "outbox": PUT,
    "tasks": READ,
    r.DLQ_MESSAGES.logical: PUT,
}

ACCESS: dict[str, Access] = {
    "executor": Access(
        tables={**_RUN_WRITES, "control": READ + UPDATE, "tenants": READ},
        # the DLQ for refused messages; the execution queue for staggered fires and waiting runs
        send=("execution", "dlq"),
        target_secrets=True,
        invoke_targets=True,
        completion_key=True,
    ),
    "retry_scheduler": Access(
        # control: the worker's heartbeat (``rebound.engine.retry_scheduler.HEARTBEAT_KEY``); the
        # reports of asynchronous attempts (``rebound.ops.async_reports``, from the bus) leave
        # slots and count SLA streaks (updates) as the executor's outcomes do
        tables={**_RUN_WRITES, "policies": POLICY_READ, "control": READ + PUT + UPDATE},
        send=("execution", "dlq"),
        create_schedules=True,
        completion_key=True,
    ),
    "escalation": Access(
        # control: workstream runs, checkpoints and resource slots (``rebound.engine.workstreams``);
        # the execution queue: the message of each step a workstream starts
        tables={
            **_RUN_WRITES,
            "policies": POLICY_READ,
            "workorders": READ + PUT,
            "control": READ + PUT + UPDATE,
        },
        send=("execution",),
        publish_alerts=True,
        notification_secrets=True,
    ),
    "outbox_relay": Access(put_events=True, stream_reader=True),
    "sweeper": Access(
        tables={
            **_RUN_WRITES,
            "runs": LEDGER_RUNS + PUT,
            "tasks": TASK_LIST,
            "policies": POLICY_READ,
            "control": READ + PUT + DELETE + UPDATE,
            # The retry-health report every five minutes (``rebound.ops.health_watch``): it lists
            # the DLQ's record, reads the work orders and keeps one per failing check.
            r.DLQ_MESSAGES.logical: (*READ, *DLQ_CHECK),
            "workorders": READ + PUT,
        },
        send=("execution", "dlq"),
        receive=("dlq",),
        create_schedules=True,
        # The health report: the retry queue's backlog, the Scheduler and control DLQs' depth, the
        # group's schedules; and the notification of a finding's work order.
        queue_attributes=("retry", "scheduler_dlq", "control_dlq"),
        list_schedules=True,
        publish_alerts=True,
        notification_secrets=True,
    ),
    "ops_api": Access(completion_key=True),
}


AUDIT_REWRITES = (
    "dynamodb:UpdateItem",
    "dynamodb:DeleteItem",
    "dynamodb:BatchWriteItem",
    "dynamodb:PartiQLUpdate",
    "dynamodb:PartiQLDelete",
)
"""Denied on the audit table to every role of the stack: a record can only be added (a conditional
put), never changed or removed. BatchWriteItem is denied whole: its puts cannot carry a condition."""


def writes_audit(logical: str) -> bool:
    """Whether a function writes audit records (and so may sign them with the audit key)."""
    return "audit" in ACCESS[logical].tables


def needs_data_key(logical: str) -> bool:
    """Whether a function touches a table, queue, stream or the topic (all under the data key with
    ``encryption: cmk``): every function with access or a trigger."""
    spec = r.SPEC.function(logical)
    return ACCESS[logical] != Access() or spec.queue is not None or spec.stream_table is not None


def deny_audit_rewrites(role: iam.IRole, audit: ddb.ITable) -> None:
    """An explicit Deny of ``AUDIT_REWRITES`` on the audit table, which no Allow can override."""
    role.add_to_principal_policy(
        iam.PolicyStatement(
            sid="AuditIsAppendOnly",
            effect=iam.Effect.DENY,
            actions=list(AUDIT_REWRITES),
            resources=[audit.table_arn],
        )
    )


@dataclass(frozen=True)
class Grantables:
    tables: dict[str, ddb.ITable]
    queues: dict[str, sqs.IQueue]
    bus: events.IEventBus
    scheduling: Scheduling
    topic: sns.ITopic
    target_function_arns: tuple[str, ...]
    secret_path: str
    secrets_manager_arns: tuple[str, ...]
    notification_secrets: tuple[str, ...]
    completion_key: secretsmanager.ISecret | None = None
    topic_key_encrypted: bool = True


def _parameter_arn(scope: Construct, name: str) -> str:
    return Stack.of(scope).format_arn(service="ssm", resource="parameter", resource_name=name.lstrip("/"))


def grant_table(table: ddb.ITable, spec: r.TableSpec, role: iam.IGrantable, actions: tuple[str, ...]) -> None:
    """``actions`` on the table, and its queries on each of its indexes by name.

    ``Table.grant`` would add ``<table>/index/*``; naming the spec's indexes keeps it exact.
    """
    if not spec.indexes:
        table.grant(role, *actions)
        return
    iam.Grant.add_to_principal(grantee=role, actions=list(actions), resource_arns=[table.table_arn])
    queries = [a for a in actions if a == "dynamodb:Query"]
    if queries:
        iam.Grant.add_to_principal(
            grantee=role,
            actions=queries,
            resource_arns=[f"{table.table_arn}/index/{index.name}" for index in spec.indexes],
        )


def grant(scope: Construct, logical: str, role: iam.IRole, on: Grantables) -> None:
    if logical not in ACCESS:
        raise ValueError(
            f"function {logical!r} (rebound.resources.SPEC) has no entry in "
            "rebound_infra.permissions.ACCESS: add one listing exactly what its code calls"
        )
    access = ACCESS[logical]
    for table, actions in access.tables.items():
        grant_table(on.tables[table], r.SPEC.table(table), role, actions)
    for queue in access.send:
        on.queues[queue].grant_send_messages(role)
    for queue in access.receive:
        on.queues[queue].grant(role, "sqs:ReceiveMessage")
    for queue in access.queue_attributes:
        on.queues[queue].grant(role, "sqs:GetQueueAttributes")
    if access.list_schedules:
        iam.Grant.add_to_principal(grantee=role, actions=["scheduler:ListSchedules"], resource_arns=["*"])
        acknowledge(
            role,
            "AwsSolutions-IAM5[Resource::*]",
            "scheduler:ListSchedules supports no resource ARN: AWS requires '*'. The retry-health "
            "report lists only this environment's group (GroupName), and the action reads names and states.",
        )
    if access.put_events:
        on.bus.grant_put_events_to(role)
    if access.create_schedules:
        on.scheduling.grant_create_schedules(role)
    if access.publish_alerts:
        on.topic.grant_publish(role)
    if access.invoke_targets:
        for i, arn in enumerate(on.target_function_arns):
            lambda_.Function.from_function_arn(scope, f"{logical}Target{i}", arn).grant_invoke(role)
    if access.create_schedules:
        acknowledge(
            role,
            resource_finding(role, "AwsSolutions-IAM5", on.scheduling.schedules_arn()),
            "Schedule names are made at run time (one per task trigger or long retry); the grant is "
            "CreateSchedule only, on the schedules of this environment's group.",
        )
    if access.publish_alerts and on.topic_key_encrypted:
        acknowledge(
            role,
            "AwsSolutions-IAM5[Action::kms:GenerateDataKey*]",
            "Publishing to the KMS-encrypted alerts topic needs data keys of that one key; this is "
            "CDK's grant for it, on the topic's key only.",
        )
    if access.stream_reader:
        acknowledge(
            role,
            "AwsSolutions-IAM5[Resource::*]",
            "dynamodb:ListStreams, which the stream event source mapping needs, supports no resource "
            "ARN: AWS requires '*'. The stream reads themselves are on the outbox stream only.",
        )
    if access.completion_key and on.completion_key is not None:
        on.completion_key.grant_read(role)
    secret_refs: list[str] = []
    if access.target_secrets:
        path_arn = _parameter_arn(scope, f"{on.secret_path}/*")
        iam.Grant.add_to_principal(grantee=role, actions=["ssm:GetParameter"], resource_arns=[path_arn])
        acknowledge(
            role,
            resource_finding(role, "AwsSolutions-IAM5", path_arn),
            "Task targets name their secrets at run time; reads are limited to GetParameter under "
            "this environment's secrets path.",
        )
        secret_refs.extend(on.secrets_manager_arns)
    if access.notification_secrets:
        secret_refs.extend(on.notification_secrets)
    for i, ref in enumerate(dict.fromkeys(secret_refs)):
        if ref.startswith("arn:") and ":secretsmanager:" in ref:
            secret = secretsmanager.Secret.from_secret_complete_arn(scope, f"{logical}Secret{i}", ref)
            secret.grant_read(role)
        else:
            iam.Grant.add_to_principal(
                grantee=role,
                actions=["ssm:GetParameter"],
                resource_arns=[ref if ref.startswith("arn:") else _parameter_arn(scope, ref)],
            )
