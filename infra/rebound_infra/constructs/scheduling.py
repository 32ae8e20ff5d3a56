"""EventBridge Scheduler: the environment's schedule group and the role its schedules assume.

Rebound creates the schedules at run time (task triggers and one-time ``at()`` retries longer than
the queue's 15-minute delay) with this role, a retry policy and the Scheduler DLQ
(``rebound.adapters.scheduler.ScheduleTarget``); each targets the execution queue, except a
workstream's (``ws-<id>``), which targets the escalation queue, whose consumer starts workstream
runs. The role can send to those three queues and nothing else, and only schedules of this
account's group can assume it.
"""

from __future__ import annotations

from aws_cdk import RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_scheduler as scheduler
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from rebound_infra.nag import acknowledge


class Scheduling(Construct):
    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        execution_queue: sqs.IQueue,
        escalation_queue: sqs.IQueue,
        dead_letter_queue: sqs.IQueue,
        retain: bool,
    ) -> None:
        super().__init__(scope, id)
        stack = Stack.of(self)
        self.group = scheduler.ScheduleGroup(
            self, "Group", removal_policy=RemovalPolicy.RETAIN if retain else RemovalPolicy.DESTROY
        )
        self.role = iam.Role(
            self,
            "ExecutionRole",
            description="Assumed by Rebound's schedules to put fires and retries on the execution queue",
            assumed_by=iam.ServicePrincipal(
                "scheduler.amazonaws.com",
                conditions={
                    "StringEquals": {"aws:SourceAccount": stack.account},
                    "ArnEquals": {"aws:SourceArn": self.group.schedule_group_arn},
                },
            ),
        )
        execution_queue.grant_send_messages(self.role)
        escalation_queue.grant_send_messages(self.role)  # workstreams' schedules start their runs
        # Scheduler sends undeliverable invocations to the target's DLQ with the target's role.
        dead_letter_queue.grant_send_messages(self.role)
        acknowledge(
            dead_letter_queue,
            "AwsSolutions-SQS3",
            "This queue is itself a dead-letter queue: EventBridge Scheduler's, named in each "
            "schedule's DeadLetterConfig (not in an SQS redrive policy, which cdk-nag looks for).",
        )

    def schedules_arn(self) -> str:
        """Every schedule in the group (their names are chosen at run time)."""
        return Stack.of(self).format_arn(
            service="scheduler", resource="schedule", resource_name=f"{self.group.schedule_group_name}/*"
        )

    def grant_create_schedules(self, grantee: iam.IGrantable) -> None:
        """Create schedules in the group, and hand them the execution role."""
        iam.Grant.add_to_principal(
            grantee=grantee, actions=["scheduler:CreateSchedule"], resource_arns=[self.schedules_arn()]
        )
        self.role.grant_pass_role(grantee.grant_principal)
