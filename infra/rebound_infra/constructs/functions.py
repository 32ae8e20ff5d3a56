"""One factory builds every function in ``SPEC.functions``, and wires the trigger its spec names.

Each function gets: python3.13 on arm64, the shared code asset and dependencies layer, the
environment ``rebound.settings.settings_from_env`` reads, its own log group and its own role
(no managed policies; rights come from ``grant_*`` calls in ``rebound_infra.permissions``).

Triggers, from the spec:

- ``queue``: an SQS event source mapping with ``ReportBatchItemFailures`` and a maximum
  concurrency; the queue's visibility timeout must be at least six times the function timeout.
- ``stream_table``: a DynamoDB stream mapping (the outbox relay's, the archiver's): inserts only,
  batch item failures, bisect on error, bounded retries, the spec's batching window, and an
  on-failure destination (the control DLQ).
- ``every_minute``: an EventBridge Scheduler schedule with a retry policy and the Scheduler DLQ.
"""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import Duration, RemovalPolicy, Stack
from aws_cdk import aws_dynamodb as ddb
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as sources
from aws_cdk import aws_logs as logs
from aws_cdk import aws_scheduler as scheduler
from aws_cdk import aws_scheduler_targets as targets
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from rebound import resources as r
from rebound_infra.nag import acknowledge, resource_finding

RUNTIME = lambda_.Runtime.PYTHON_3_13
ARCHITECTURE = lambda_.Architecture.ARM_64
VISIBILITY_FACTOR = 6
SWEEP_RETRY_ATTEMPTS = 2
SWEEP_MAX_EVENT_AGE = Duration.minutes(1)  # the next sweep is due by then


@dataclass(frozen=True)
class VpcPlacement:
    """Subnets and security groups of an existing VPC the functions run in."""

    vpc: ec2.IVpc
    subnets: ec2.SubnetSelection
    security_groups: tuple[ec2.ISecurityGroup, ...]


@dataclass(frozen=True)
class FunctionInputs:
    """What every function shares."""

    code: lambda_.Code
    layer: lambda_.ILayerVersion
    environment: dict[str, str]
    log_retention: logs.RetentionDays
    removal_policy: RemovalPolicy
    log_key: kms.IKey | None = None
    """Encrypts the log groups (``encryption: cmk``); ``None``: CloudWatch Logs' own encryption."""
    vpc: VpcPlacement | None = None
    """Where the functions run inside a VPC (the environment's optional ``vpc``)."""
    tracing: bool = False
    """Lambda active tracing (X-Ray); the environment's ``tracing``."""


@dataclass(frozen=True)
class Triggers:
    """The resources the specs' triggers name."""

    queues: dict[str, sqs.IQueue]
    tables: dict[str, ddb.ITable]
    stream_failures: sqs.IQueue
    scheduler_dlq: sqs.IQueue
    outbox_retry_attempts: int
    outbox_max_record_age_s: int


def check_visibility(spec: r.FunctionSpec, queue: r.QueueSpec) -> None:
    """AWS: a queue's visibility timeout should be at least six times its consumer's timeout."""
    if queue.visibility_timeout_s < VISIBILITY_FACTOR * spec.timeout_s:
        raise ValueError(
            f"queue {queue.logical}: visibility timeout {queue.visibility_timeout_s}s is less than "
            f"{VISIBILITY_FACTOR} x the {spec.logical} timeout ({spec.timeout_s}s)"
        )


class ReboundFunction(Construct):
    """A function, its role and its log group."""

    def __init__(self, scope: Construct, spec: r.FunctionSpec, inputs: FunctionInputs) -> None:
        super().__init__(scope, spec.logical)
        self.spec = spec
        self.log_group = logs.LogGroup(
            self,
            "Logs",
            retention=inputs.log_retention,
            removal_policy=inputs.removal_policy,
            encryption_key=inputs.log_key,
        )
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"Rebound {spec.logical}: {spec.purpose}"[:1000],
        )
        self.log_group.grant_write(self.role)
        self.function = lambda_.Function(
            self,
            "Function",
            runtime=RUNTIME,
            architecture=ARCHITECTURE,
            handler=spec.handler,
            code=inputs.code,
            layers=[inputs.layer],
            timeout=Duration.seconds(spec.timeout_s),
            memory_size=spec.memory_mb,
            role=self.role,
            environment={**inputs.environment, "POWERTOOLS_SERVICE_NAME": r.service_name(spec.logical)},
            log_group=self.log_group,
            description=f"Rebound {spec.logical}: {spec.purpose}"[:256],
            vpc=inputs.vpc.vpc if inputs.vpc else None,
            vpc_subnets=inputs.vpc.subnets if inputs.vpc else None,
            security_groups=list(inputs.vpc.security_groups) if inputs.vpc else None,
            tracing=lambda_.Tracing.ACTIVE if inputs.tracing else None,
        )
        if inputs.tracing:
            acknowledge(
                self.role,
                "AwsSolutions-IAM5[Resource::*]",
                "Active tracing adds xray:PutTraceSegments and xray:PutTelemetryRecords, which X-Ray "
                "grants on no narrower resource than *; the role's other rights name their resources.",
            )
        if inputs.vpc is not None:
            acknowledge(
                self.role,
                "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/"
                "AWSLambdaVPCAccessExecutionRole]",
                "A function in a VPC needs to create and delete its network interfaces; this is the "
                "AWS managed policy for exactly that, which Lambda documents for VPC access.",
            )
        acknowledge(
            self.function,
            "AwsSolutions-L1",
            "Rebound targets python3.13 on arm64 (issue #4): its dependencies are pinned and built "
            "for cp313, and moving to a newer runtime is a deliberate, tested upgrade.",
        )


class Functions(Construct):
    """The factory: ``SPEC.functions`` in, one ``ReboundFunction`` each, triggers wired."""

    def __init__(self, scope: Construct, id: str, *, inputs: FunctionInputs, triggers: Triggers) -> None:
        super().__init__(scope, id)
        self.functions: dict[str, ReboundFunction] = {}
        for spec in r.SPEC.functions:
            built = ReboundFunction(self, spec, inputs)
            self._wire(built, triggers)
            self.functions[spec.logical] = built

    def __getitem__(self, logical: str) -> ReboundFunction:
        return self.functions[logical]

    def _wire(self, built: ReboundFunction, triggers: Triggers) -> None:
        spec, fn = built.spec, built.function
        if spec.queue is not None:
            check_visibility(spec, r.SPEC.queue(spec.queue))
            fn.add_event_source(
                sources.SqsEventSource(
                    triggers.queues[spec.queue],
                    batch_size=spec.batch_size,
                    max_concurrency=spec.max_concurrency,
                    report_batch_item_failures=True,
                )
            )
        if spec.stream_table is not None:
            fn.add_event_source(
                sources.DynamoEventSource(
                    triggers.tables[spec.stream_table],
                    starting_position=lambda_.StartingPosition.TRIM_HORIZON,
                    batch_size=spec.batch_size,
                    bisect_batch_on_error=True,
                    report_batch_item_failures=True,
                    retry_attempts=triggers.outbox_retry_attempts,
                    max_record_age=Duration.seconds(triggers.outbox_max_record_age_s),
                    parallelization_factor=1,
                    max_batching_window=Duration.seconds(spec.batch_window_s)
                    if spec.batch_window_s
                    else None,
                    on_failure=sources.SqsDlq(triggers.stream_failures),
                    # TTL deletions are stream records too; only inserts are events (the outbox's)
                    # or records to archive (the audit table's).
                    filters=[
                        lambda_.FilterCriteria.filter({"eventName": lambda_.FilterRule.is_equal("INSERT")})
                    ],
                )
            )
        if spec.every_minute:
            # Its own role (the target grants it invoke on this function and sends to the DLQ).
            role = iam.Role(
                built,
                "ScheduleRole",
                description=f"Assumed by the schedule that invokes Rebound {spec.logical} every minute",
                assumed_by=iam.ServicePrincipal(
                    "scheduler.amazonaws.com",
                    conditions={
                        "StringEquals": {
                            "aws:SourceAccount": Stack.of(self).account,
                            # The schedule sits in the default group, apart from Rebound's own.
                            "aws:SourceArn": Stack.of(self).format_arn(
                                service="scheduler", resource="schedule-group", resource_name="default"
                            ),
                        }
                    },
                ),
            )
            acknowledge(
                role,
                resource_finding(role, "AwsSolutions-IAM5", f"{fn.function_arn}:*"),
                "LambdaInvoke grants invoke on the function and its versions (ARN:*); the role is "
                "this schedule's own and can invoke nothing but this one function.",
            )
            scheduler.Schedule(
                built,
                "EveryMinute",
                schedule=scheduler.ScheduleExpression.rate(Duration.minutes(1)),
                description=f"Rebound {spec.logical}: {spec.purpose}"[:512],
                target=targets.LambdaInvoke(
                    fn,
                    role=role,
                    dead_letter_queue=triggers.scheduler_dlq,
                    retry_attempts=SWEEP_RETRY_ATTEMPTS,
                    max_event_age=SWEEP_MAX_EVENT_AGE,
                ),
            )
            # Invoked asynchronously once a minute: a failed sweep is not retried by Lambda, the
            # next one repeats its work.
            fn.configure_async_invoke(retry_attempts=0, max_event_age=SWEEP_MAX_EVENT_AGE)
