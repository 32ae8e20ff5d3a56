"""The environment's EventBridge bus, an archive of Rebound's events, and ``SPEC.rules``.

Each rule sends its detail types from the environment's source (``outbox.source``) to the queue
its spec names, with
EventBridge's retry policy and the control DLQ for what it cannot deliver.

Event-triggered tasks get their rules at run time (``rebound tasks apply``), named
``task-<task id>`` on this bus. The execution queue and the control DLQ accept messages from
exactly those rules: a resource policy conditioned on the rule ARN prefix.
"""

from __future__ import annotations

from typing import Any

from aws_cdk import Duration, RemovalPolicy, Stack
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as events_targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from rebound import resources as r
from rebound.domain.ids import task_rule_name, workstream_rule_name

RULE_MAX_EVENT_AGE = Duration.hours(24)
RULE_RETRY_ATTEMPTS = 185


def event_pattern(rule: r.RuleSpec, source: str = r.SPEC.event_source) -> dict[str, Any]:
    """The rule's pattern as CloudFormation and the local cloud hold it."""
    return {"source": [source], "detail-type": list(rule.detail_types)}


class Events(Construct):
    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        queues: dict[str, sqs.IQueue],
        dead_letter_queue: sqs.IQueue,
        archive_retention_days: int,
        retain: bool,
        source: str = r.SPEC.event_source,
    ) -> None:
        super().__init__(scope, id)
        self.bus = events.EventBus(self, "Bus", description="Rebound's run, retry and work-order events")
        self.bus.archive(
            "Archive",
            description="Rebound's events, for replay after an outage of a consumer",
            event_pattern=events.EventPattern(source=[source]),
            retention=Duration.days(archive_retention_days),
        )
        self.bus.apply_removal_policy(RemovalPolicy.RETAIN if retain else RemovalPolicy.DESTROY)
        self.rules: dict[str, events.Rule] = {}
        for spec in r.SPEC.rules:
            self.rules[spec.logical] = events.Rule(
                self,
                spec.logical,
                event_bus=self.bus,
                description=spec.purpose,
                event_pattern=events.EventPattern(source=[source], detail_type=list(spec.detail_types)),
                targets=[
                    events_targets.SqsQueue(
                        queues[spec.queue],
                        dead_letter_queue=dead_letter_queue,
                        retry_attempts=RULE_RETRY_ATTEMPTS,
                        max_event_age=RULE_MAX_EVENT_AGE,
                    )
                ],
            )
        self.task_rules_arn = Stack.of(self).format_arn(
            service="events",
            resource="rule",
            resource_name=f"{self.bus.event_bus_name}/{task_rule_name('*')}",
        )
        # CDK grants a rule's KMS-encrypted target queue to EventBridge without the rule's ARN as
        # a condition (encryption: cmk); this Deny keeps every send to the bus's own rules.
        bus_rules_arn = Stack.of(self).format_arn(
            service="events", resource="rule", resource_name=f"{self.bus.event_bus_name}/*"
        )
        targets = {r.EXECUTION.logical, r.CONTROL_DLQ.logical, *(spec.queue for spec in r.SPEC.rules)}
        for logical in sorted(targets):
            queue = dead_letter_queue if logical == r.CONTROL_DLQ.logical else queues[logical]
            if queue.encryption_master_key is None:
                continue
            queue.add_to_resource_policy(
                iam.PolicyStatement(
                    sid="OnlyThisBusRules",
                    effect=iam.Effect.DENY,
                    principals=[iam.ServicePrincipal("events.amazonaws.com")],
                    actions=["sqs:SendMessage"],
                    resources=[queue.queue_arn],
                    conditions={"ArnNotLike": {"aws:SourceArn": bus_rules_arn}},
                )
            )
        # A workstream started by events has a rule of its own (ws-<id>) whose target is the
        # escalation queue (its consumer starts the run) and whose DLQ is the control DLQ.
        self.workstream_rules_arn = Stack.of(self).format_arn(
            service="events",
            resource="rule",
            resource_name=f"{self.bus.event_bus_name}/{workstream_rule_name('*')}",
        )
        grants = (
            ("EventTriggeredTaskRules", self.task_rules_arn, r.EXECUTION.logical),
            ("EventTriggeredWorkstreamRules", self.workstream_rules_arn, r.ESCALATION.logical),
        )
        for sid, rules_arn, target in grants:
            for queue in (queues[target], dead_letter_queue):
                queue.add_to_resource_policy(
                    iam.PolicyStatement(
                        sid=sid,
                        principals=[iam.ServicePrincipal("events.amazonaws.com")],
                        actions=["sqs:SendMessage"],
                        resources=[queue.queue_arn],
                        conditions={"ArnLike": {"aws:SourceArn": rules_arn}},
                    )
                )
