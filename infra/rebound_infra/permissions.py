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
- The ops API (``ops_api``) serves the operators' routes (``rebound.api``): its rights are exactly
  the calls its handler makes while serving every route (tests/integration/test_ops_api_rights.py
  decides each under the role in every environment's template, and fails on a grant none uses).

Keep this table in step with the engine: a new AWS call needs a line here, and the infra tests
fail on a right that no function should have. ``rebound local rehearse`` runs every function under
the role this table gives it in the synthesized template and fails on a call it does not allow
(tests/e2e/test_rehearse.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

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
from rebound.domain.ids import task_rule_name
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
# ``rebound state check|repair`` (``rebound.ops.state``) pages through the runs and work orders, and
# an unfiltered work-order list scans its table.
STATE_SCAN = ("dynamodb:Scan",)
# The sweeper's DLQ check reads the records of what it received (BatchGetItem), records what it
# found without one (PutItem) and marks the second copies it removes (UpdateItem).
DLQ_CHECK = ("dynamodb:BatchGetItem", *PUT, *UPDATE)
# The ops API's Scheduler calls: a task's schedules follow its registration, pause and resume
# (read, then created or updated; removed ones deleted). ListSchedules takes no resource ARN.
SCHEDULE_MANAGE = (
    "scheduler:CreateSchedule",
    "scheduler:UpdateSchedule",
    "scheduler:DeleteSchedule",
    "scheduler:GetSchedule",
)
SCHEDULE_LIST = "scheduler:ListSchedules"
# An event-triggered task's rule on the bus (``rebound.adapters.bus``: put, read, remove).
RULE_MANAGE = (
    "events:PutRule",
    "events:PutTargets",
    "events:DescribeRule",
    "events:ListTargetsByRule",
    "events:RemoveTargets",
    "events:DeleteRule",
)
# Queue ages (``rebound.adapters.queues.CloudWatchQueueAges``): GetMetricStatistics takes no
# resource ARN.
METRIC_READ = "cloudwatch:GetMetricStatistics"
TASK_RULE_PREFIX = task_rule_name("")
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
    take: tuple[str, ...] = ()
    """Queues it removes received messages from, or hands them back (the DLQ redrive)."""
    queue_depths: bool = False
    """Reads every queue's attributes (depths) and their oldest message's age (CloudWatch)."""
    manage_schedules: bool = False
    """Creates, updates, deletes, reads and lists the group's schedules (task registration)."""
    manage_rules: bool = False
    """Writes, reads and removes the rules of event-triggered tasks on the bus."""
    invoke_self: bool = False
    """Invokes its own function (a redrive job's next chunk)."""
    read_flags: bool = False
    """Read the feature flags (AppConfigData: a session and its latest configuration)."""
    write_flags: bool = False
    """Change them (``PUT /flags/<name>``): a new hosted version of the profile, deployed."""
    archive_audit: bool = False
    """Writes batches of audit records to the audit archive (S3 ``PutObject`` under ``audit/``)."""
    read_streams: tuple[str, ...] = ()
    """Tables whose stream it reads outside a mapping: a range a mapping gave up on, read again."""


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
        read_flags=True,
        tables={**_RUN_WRITES, "control": READ + UPDATE, "tenants": READ},
        # the DLQ for refused messages; the execution queue for staggered fires and waiting runs
        send=("execution", "dlq"),
        target_secrets=True,
        invoke_targets=True,
        completion_key=True,
    ),
    "retry_scheduler": Access(
        read_flags=True,
        # control: the worker's heartbeat (``rebound.engine.retry_scheduler.HEARTBEAT_KEY``); the
        # reports of asynchronous attempts (``rebound.engine.async_reports``, from the bus) leave
        # slots and count SLA streaks (updates) as the executor's outcomes do; the retry budget
        # per target (``rebound.engine.target_budgets``: a target's record, read and put).
        # workorders: the failure that makes a target unhealthy opens its work order in the same
        # transaction (a conditional put; the sweeper notifies it)
        tables={
            **_RUN_WRITES,
            "policies": POLICY_READ,
            "control": READ + PUT + UPDATE,
            "workorders": PUT,
        },
        send=("execution", "dlq"),
        create_schedules=True,
        completion_key=True,
    ),
    "escalation": Access(
        read_flags=True,
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
    # The audit table's stream in (its mapping grants the reads), batches of records out to S3.
    "archiver": Access(stream_reader=True, archive_audit=True),
    "sweeper": Access(
        read_flags=True,
        tables={
            **_RUN_WRITES,
            "runs": LEDGER_RUNS + PUT,
            "tasks": TASK_LIST,
            "policies": POLICY_READ,
            "control": READ + PUT + DELETE + UPDATE,
            # The retry-health report every five minutes (``rebound.engine.health.watch``): it lists
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
        # A stream batch the relay or the archiver gave up on (a failure record in the control
        # DLQ) is read again from its table's stream and published, or archived
        # (``Sweeper.work_control_dlq``).
        archive_audit=True,
        read_streams=(r.OUTBOX.logical, r.AUDIT.logical),
        put_events=True,
    ),
    # Every route's calls (tests/integration/test_ops_api_rights.py): tasks registered, paused and
    # resumed with their schedules and rules; runs read, retried, skipped and cancelled; the DLQ
    # read and redriven onto the execution queue (a large redrive continues as a job in this
    # function invoking itself); work orders, policies, audit checks, health and the delivery-retry
    # plan, whose execution delivers again through escalation's channels (SNS and its secrets);
    # state check and repair read the runs and work orders a page at a time (a Scan).
    "ops_api": Access(
        tables={
            "tasks": ("dynamodb:GetItem", *PUT, "dynamodb:Scan"),
            "runs": (*LEDGER_RUNS, *PUT, *STATE_SCAN),
            "audit": ("dynamodb:Query", *PUT),
            "outbox": PUT,
            "policies": ("dynamodb:Query", "dynamodb:Scan", *PUT),
            # BatchGetItem: a bulk registration reads its schedules' sync records 100 at a time
            "control": (*READ[:1], "dynamodb:BatchGetItem", *PUT, *UPDATE, *DELETE),
            "workorders": (*READ, *PUT, *STATE_SCAN),
            r.DLQ_MESSAGES.logical: READ + UPDATE,
            "dlq_archive": READ[:1],
            "tenants": READ[:1],  # the pre-flight reads the tenants' quotas
        },
        send=("execution",),
        receive=("dlq",),
        take=("dlq",),
        queue_depths=True,
        manage_schedules=True,
        manage_rules=True,
        publish_alerts=True,
        notification_secrets=True,
        completion_key=True,
        invoke_self=True,
        read_flags=True,
        write_flags=True,
    ),
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
    flags: Any = None
    """The feature flags' AppConfig resources (``rebound_infra.constructs.flags.FeatureFlags``)."""
    topic_key_encrypted: bool = True
    keep_indexes: tuple[str, ...] = ()
    """Retired indexes the stack keeps while it upgrades (``upgrade.keep_indexes``): queried too."""
    archive: Any = None
    """The audit archive (``rebound_infra.constructs.archive.AuditArchive``)."""


def _parameter_arn(scope: Construct, name: str) -> str:
    return Stack.of(scope).format_arn(service="ssm", resource="parameter", resource_name=name.lstrip("/"))


def grant_table(
    table: ddb.ITable,
    spec: r.TableSpec,
    role: iam.IGrantable,
    actions: tuple[str, ...],
    keep_indexes: tuple[str, ...] = (),
) -> None:
    """``actions`` on the table, and its queries on each of its indexes by name.

    ``Table.grant`` would add ``<table>/index/*``; naming the spec's indexes keeps it exact.
    """
    indexes = spec.built_indexes(keep_indexes)
    if not indexes:
        table.grant(role, *actions)
        return
    iam.Grant.add_to_principal(grantee=role, actions=list(actions), resource_arns=[table.table_arn])
    queries = [a for a in actions if a == "dynamodb:Query"]
    if queries:
        iam.Grant.add_to_principal(
            grantee=role,
            actions=queries,
            resource_arns=[f"{table.table_arn}/index/{index.name}" for index in indexes],
        )


def grant(
    scope: Construct,
    logical: str,
    role: iam.IRole,
    on: Grantables,
    function: lambda_.IFunction | None = None,
) -> None:
    """``function``: the role's own function (``invoke_self``)."""
    if logical not in ACCESS:
        raise ValueError(
            f"function {logical!r} (rebound.resources.SPEC) has no entry in "
            "rebound_infra.permissions.ACCESS: add one listing exactly what its code calls"
        )
    access = ACCESS[logical]
    for table, actions in access.tables.items():
        grant_table(on.tables[table], r.SPEC.table(table), role, actions, on.keep_indexes)
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
    for queue in access.take:
        on.queues[queue].grant(role, "sqs:DeleteMessage", "sqs:ChangeMessageVisibility")
    if access.queue_depths:
        for each in on.queues.values():
            each.grant(role, "sqs:GetQueueAttributes")
    if access.put_events:
        on.bus.grant_put_events_to(role)
    if access.create_schedules and not access.manage_schedules:
        on.scheduling.grant_create_schedules(role)
    star: list[str] = []
    if access.manage_schedules:
        iam.Grant.add_to_principal(
            grantee=role, actions=list(SCHEDULE_MANAGE), resource_arns=[on.scheduling.schedules_arn()]
        )
        on.scheduling.role.grant_pass_role(role)
        star.append(SCHEDULE_LIST)
    if access.queue_depths:
        star.append(METRIC_READ)
    if star:
        iam.Grant.add_to_principal(grantee=role, actions=star, resource_arns=["*"])
        acknowledge(
            role,
            "AwsSolutions-IAM5[Resource::*]",
            f"{' and '.join(star)} take no resource ARN: AWS requires '*'. Both only read (schedule "
            "names and states; queue age metrics); every write is on named resources.",
        )
    if access.manage_rules:
        rules_arn = Stack.of(scope).format_arn(
            service="events", resource="rule", resource_name=f"{on.bus.event_bus_name}/{TASK_RULE_PREFIX}*"
        )
        iam.Grant.add_to_principal(grantee=role, actions=list(RULE_MANAGE), resource_arns=[rules_arn])
        acknowledge(
            role,
            resource_finding(role, "AwsSolutions-IAM5", rules_arn),
            "Event-triggered tasks get their rules at run time (task-<id>); the grant is on the rules "
            "of this environment's bus whose names start with task- only.",
        )
    if access.invoke_self:
        if function is None:
            raise ValueError(f"{logical!r} invokes itself: grant() needs its function")
        # A policy of its own: the function depends on its role's default policy, so naming the
        # function's ARN there would be a dependency cycle.
        iam.Policy(
            scope,
            "InvokeSelf",
            roles=[role],
            statements=[
                iam.PolicyStatement(actions=["lambda:InvokeFunction"], resources=[function.function_arn])
            ],
        )
    if access.read_flags and on.flags is not None:
        iam.Grant.add_to_principal(
            grantee=role,
            actions=["appconfig:StartConfigurationSession", "appconfig:GetLatestConfiguration"],
            resource_arns=[on.flags.read_arn()],
        )
    if access.write_flags and on.flags is not None:
        iam.Grant.add_to_principal(
            grantee=role,
            actions=["appconfig:CreateHostedConfigurationVersion"],
            resource_arns=[on.flags.profile_arn()],
        )
        iam.Grant.add_to_principal(
            grantee=role, actions=["appconfig:StartDeployment"], resource_arns=on.flags.deploy_arns()
        )
    if access.publish_alerts:
        on.topic.grant_publish(role)
    if access.invoke_targets:
        for i, arn in enumerate(on.target_function_arns):
            lambda_.Function.from_function_arn(scope, f"{logical}Target{i}", arn).grant_invoke(role)
    if access.create_schedules or access.manage_schedules:
        acknowledge(
            role,
            resource_finding(role, "AwsSolutions-IAM5", on.scheduling.schedules_arn()),
            "Schedule names are made at run time (one per task trigger or long retry); the grant is "
            "on the schedules of this environment's group only: CreateSchedule, and for the ops "
            "API (task registration, pause, resume) also Update, Delete and Get.",
        )
    if access.publish_alerts and on.topic_key_encrypted:
        acknowledge(
            role,
            "AwsSolutions-IAM5[Action::kms:GenerateDataKey*]",
            "Publishing to the KMS-encrypted alerts topic needs data keys of that one key; this is "
            "CDK's grant for it, on the topic's key only.",
        )
    if access.archive_audit and on.archive is not None:
        on.archive.grant_write(role)
        acknowledge(
            role,
            resource_finding(role, "AwsSolutions-IAM5", f"{on.archive.bucket.bucket_arn}/audit/*"),
            "Each batch of audit records is a new object named at run time (its day and stream "
            "sequence numbers); the grant is PutObject under audit/ of the archive bucket only.",
        )
    for table in access.read_streams:
        on.tables[table].grant_stream_read(role)
    if access.stream_reader or access.read_streams:
        acknowledge(
            role,
            "AwsSolutions-IAM5[Resource::*]",
            "dynamodb:ListStreams, which reading a table's stream needs, supports no resource ARN: AWS "
            "requires '*'. The stream reads themselves are on the named tables' streams only.",
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
