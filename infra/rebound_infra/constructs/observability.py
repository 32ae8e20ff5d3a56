"""Alarms (ARCHITECTURE.md, Telemetry), all acting on the alerts topic, and the dashboard.

The alerts topic is also where escalation publishes work orders. It is encrypted with a customer
managed key because CloudWatch alarms cannot publish to a topic under the AWS managed SNS key.

Every alarm names its runbook: a page in ``docs/runbooks`` (``RUNBOOKS``, ``ERRORS_RUNBOOKS``),
linked at the end of its description under the environment's ``runbook_base_url``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from aws_cdk import Duration, RemovalPolicy, Stack
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_dynamodb as ddb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subs
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from rebound import resources as r
from rebound.engine import telemetry as m
from rebound.handlers.observability import NAMESPACE
from rebound_infra.config import AlarmThresholds
from rebound_infra.constructs.dashboard import DashboardBuilder
from rebound_infra.telemetry import EMITTERS

QUEUE_PERIOD = Duration.minutes(5)
AlarmT = TypeVar("AlarmT", bound=cw.AlarmBase)

# The runbook page of each alarm, in docs/runbooks. The DLQ alarms share one page.
RUNBOOKS = {
    "RetryFailureRate": "retry-failure-rate.md",
    "SchedulingFailureRate": "scheduling-failure-rate.md",
    "WorkOrderFailures": "work-order-failures.md",
    "SlaBreaches": "sla-breaches.md",
    "LockContention": "lock-contention.md",
    "ExecutionBacklog": "execution-backlog.md",
    "OutboxLag": "outbox-lag.md",
    "SweeperItemFailures": "sweeper-item-failures.md",
    "ManualRecoveryCompletion": "manual-recovery-completion.md",
    "RetrySuccessSlo": "retry-success-slo.md",
    "OnTimeSlo": "on-time-slo.md",
    "ExecutionSuccessSlo": "execution-success-slo.md",
    "RetryHealthUnhealthy": "retry-health-unhealthy.md",
}
SLO_WINDOW = Duration.hours(1)
DLQ_RUNBOOK = "dlq-depth-and-age.md"
# Provisioned capacity only: each table's ``<Table>Throttled`` alarm shares one page.
THROTTLING_RUNBOOK = "dynamodb-throttling.md"
THROTTLED_PERIODS = 3
# The runbook of each function's ``<Function>Errors`` alarm, by the function's logical name.
ERRORS_RUNBOOKS = {
    "executor": "executor-errors.md",
    "retry_scheduler": "retry-scheduler-errors.md",
    "escalation": "escalation-errors.md",
    "outbox_relay": "outbox-relay-errors.md",
    "archiver": "archive-failures.md",
    "sweeper": "sweeper-errors.md",
    "ops_api": "ops-api-errors.md",
}


class Observability(DashboardBuilder, Construct):
    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        environment: str,
        thresholds: AlarmThresholds,
        alarm_emails: Sequence[str],
        retain: bool,
        runbook_base_url: str = "docs/runbooks",
        key: kms.IKey | None = None,
    ) -> None:
        super().__init__(scope, id)
        self.environment = environment
        self.runbook_base_url = runbook_base_url.rstrip("/")
        self.thresholds = thresholds
        if key is not None:  # the environment's customer-managed key (encryption: cmk) lets alarms in
            self.key: kms.IKey = key
        else:
            self.key = self._alerts_key(retain)
        self.topic = sns.Topic(
            self,
            "Alerts",
            display_name=f"Rebound {environment} alerts",
            master_key=self.key,
            enforce_ssl=True,
        )
        for email in alarm_emails:
            self.topic.add_subscription(subs.EmailSubscription(email))
        self.alarms: dict[str, cw.AlarmBase] = {}
        self.windows: dict[str, cw.Alarm] = {}
        """The windows of the burn-rate alarms: no action of their own; their composite pages."""
        self.runbooks: dict[str, str] = {}
        """The runbook page (a file name in docs/runbooks) of each alarm, by alarm id."""
        self.dashboard = cw.Dashboard(self, "Dashboard", default_interval=Duration.hours(6))

    def _alerts_key(self, retain: bool) -> kms.Key:
        """A key of the topic's own: SNS's AWS managed key does not let CloudWatch alarms publish."""
        key = kms.Key(
            self,
            "AlertsKey",
            description="Encrypts Rebound's alerts topic",
            enable_key_rotation=True,
            removal_policy=RemovalPolicy.RETAIN if retain else RemovalPolicy.DESTROY,
        )
        key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="CloudWatchAlarmsPublish",
                principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
                actions=["kms:Decrypt", "kms:GenerateDataKey*"],
                resources=["*"],  # in a key policy, "*" is this key
                conditions={"StringEquals": {"aws:SourceAccount": Stack.of(self).account}},
            )
        )
        return key

    # --------------------------------------------------------------------------- metrics
    def app_metric(
        self, name: str, service: str, statistic: str = "Sum", period: Duration | None = None
    ) -> cw.Metric:
        return cw.Metric(
            namespace=NAMESPACE,
            metric_name=name,
            dimensions_map={"environment": self.environment, "service": r.service_name(service)},
            statistic=statistic,
            period=period or Duration.minutes(5),
        )

    def total(self, name: str, prefix: str, period: Duration) -> tuple[str, dict[str, cw.IMetric]]:
        """``FILL(a,0)+FILL(b,0)`` over every emitter of ``name``, and the metrics it uses."""
        using: dict[str, cw.IMetric] = {
            f"{prefix}{i}": self.app_metric(name, svc, period=period) for i, svc in enumerate(EMITTERS[name])
        }
        return "(" + " + ".join(f"FILL({k}, 0)" for k in using) + ")", using

    def failure_rate(self, success: str, failure: str, window_minutes: int, label: str) -> cw.MathExpression:
        return self._share(success, failure, Duration.minutes(window_minutes), label, of_failures=True)

    def success_rate(self, success: str, failure: str, period: Duration, label: str) -> cw.MathExpression:
        """Percent of ``success`` among ``success`` and ``failure`` (100 with neither: no event
        spends no budget)."""
        return self._share(success, failure, period, label, of_failures=False)

    def _share(
        self, success: str, failure: str, period: Duration, label: str, *, of_failures: bool
    ) -> cw.MathExpression:
        ok, ok_metrics = self.total(success, "s", period)
        bad, bad_metrics = self.total(failure, "f", period)
        part, empty = (bad, 0) if of_failures else (ok, 100)
        return cw.MathExpression(
            expression=f"IF(({ok} + {bad}) > 0, 100 * {part} / ({ok} + {bad}), {empty})",
            using_metrics={**ok_metrics, **bad_metrics},
            period=period,
            label=label,
        )

    def scheduling_failure_rate(self, period: Duration) -> cw.MathExpression:
        """Percent of scheduling that failed: missed fires and failed retry dispatches, among every
        fire due (first attempts started, plus the missed) and every retry dispatch."""
        dispatched_ok, ok_metrics = self.total(m.SCHEDULING_SUCCESS, "s", period)
        dispatch_failed, failed_metrics = self.total(m.SCHEDULING_FAILURE, "f", period)
        missed, missed_metrics = self.total(m.SCHEDULER_MISSED, "x", period)
        started = {
            f"t{i}": self.app_metric(m.SCHEDULER_ON_TIME, svc, statistic="SampleCount", period=period)
            for i, svc in enumerate(EMITTERS[m.SCHEDULER_ON_TIME])
        }
        fired = "(" + " + ".join(f"FILL({k}, 0)" for k in started) + ")"
        bad = f"({dispatch_failed} + {missed})"
        total = f"({dispatched_ok} + {dispatch_failed} + {missed} + {fired})"
        return cw.MathExpression(
            expression=f"IF({total} > 0, 100 * {bad} / {total}, 0)",
            using_metrics={**ok_metrics, **failed_metrics, **missed_metrics, **started},
            period=period,
            label="scheduling failure % (missed fires, failed dispatches)",
        )

    def summed(self, name: str, period: Duration, label: str) -> cw.IMetric:
        if len(EMITTERS[name]) == 1:
            return self.app_metric(name, EMITTERS[name][0], period=period).with_(label=label)
        expression, using = self.total(name, "m", period)
        return cw.MathExpression(expression=expression, using_metrics=using, period=period, label=label)

    # --------------------------------------------------------------------------- alarms
    def alarm(
        self,
        id: str,
        metric: cw.IMetric,
        *,
        threshold: float,
        description: str,
        runbook: str | None = None,
        comparison: cw.ComparisonOperator = cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
        evaluation_periods: int = 1,
    ) -> cw.Alarm:
        """An alarm on the alerts topic. ``runbook`` defaults to ``RUNBOOKS[id]``; none is an error."""
        page = runbook or RUNBOOKS.get(id)
        if page is None:
            raise ValueError(f"alarm {id} has no runbook: add its page to docs/runbooks and RUNBOOKS")
        alarm = cw.Alarm(
            self,
            id,
            metric=metric,
            threshold=threshold,
            comparison_operator=comparison,
            evaluation_periods=evaluation_periods,
            datapoints_to_alarm=evaluation_periods,
            treat_missing_data=cw.TreatMissingData.NOT_BREACHING,
            alarm_description=f"Rebound {self.environment}: {description}. "
            f"Runbook: {self.runbook_base_url}/{page}",
        )
        return self._notifying(id, alarm, page)

    def _notifying(self, id: str, alarm: AlarmT, page: str) -> AlarmT:
        """``alarm`` notifies the alerts topic on alarm and on OK, with its runbook recorded."""
        action = cw_actions.SnsAction(self.topic)
        alarm.add_alarm_action(action)
        alarm.add_ok_action(action)
        self.alarms[id] = alarm
        self.runbooks[id] = page
        return alarm

    def burn_rate_alarm(
        self,
        id: str,
        window: Callable[[Duration], cw.IMetric],
        *,
        threshold: float,
        description: str,
    ) -> cw.CompositeAlarm:
        """An SLO alarm in burn-rate style: the SLO's own window (1 h) and a short one must both
        be below ``threshold``, so an hour spoiled by a burst that is already over does not page,
        nor does a short blip in a good hour. The two windows are alarms without actions; the
        composite pages, with the runbook ``RUNBOOKS[id]``."""
        fast = Duration.minutes(self.thresholds.slo_fast_window_minutes)
        children = []
        for suffix, period in (("Slow", SLO_WINDOW), ("Fast", fast)):
            child = cw.Alarm(
                self,
                f"{id}{suffix}",
                metric=window(period),
                threshold=threshold,
                comparison_operator=cw.ComparisonOperator.LESS_THAN_THRESHOLD,
                evaluation_periods=1,
                treat_missing_data=cw.TreatMissingData.NOT_BREACHING,
                alarm_description=f"Rebound {self.environment}: the {period.to_minutes():g}-minute window of "
                f"{id} (no action of its own: {id} notifies when both windows are in alarm)",
            )
            self.windows[f"{id}{suffix}"] = child
            children.append(child)
        page = RUNBOOKS[id]
        composite = cw.CompositeAlarm(
            self,
            id,
            alarm_rule=cw.AlarmRule.all_of(*children),
            alarm_description=f"Rebound {self.environment}: {description}. "
            f"Runbook: {self.runbook_base_url}/{page}",
        )
        return self._notifying(id, composite, page)

    def add_slo_alarms(self) -> None:
        """The user's objectives: retry success, on-time and execution success over 1 h (burn-rate
        style); scheduling failure over 5 minutes is ``SchedulingFailureRate``."""
        t = self.thresholds
        self.burn_rate_alarm(
            "RetrySuccessSlo",
            lambda period: self.success_rate(m.RETRY_SUCCESS, m.RETRY_FAILURE, period, "retry success %"),
            threshold=t.retry_success_slo_percent,
            description=f"retry success below {t.retry_success_slo_percent:g}% over 1 hour and over the "
            f"last {t.slo_fast_window_minutes} minutes",
        )
        self.burn_rate_alarm(
            "OnTimeSlo",
            lambda period: self.summed_average(m.SCHEDULER_ON_TIME, period, "on time %"),
            threshold=t.on_time_slo_percent,
            description=f"fewer than {t.on_time_slo_percent:g}% of first attempts started within 60 s of "
            f"when they were due, over 1 hour and over the last {t.slo_fast_window_minutes} minutes",
        )
        self.burn_rate_alarm(
            "ExecutionSuccessSlo",
            lambda period: self.success_rate(
                m.EXECUTION_SUCCESS, m.EXECUTION_FAILURE, period, "execution success %"
            ),
            threshold=t.execution_success_slo_percent,
            description=f"execution success below {t.execution_success_slo_percent:g}% over 1 hour and "
            f"over the last {t.slo_fast_window_minutes} minutes",
        )

    def add_alarms(
        self,
        *,
        execution_queue: sqs.IQueue,
        dead_letter_queues: Mapping[str, sqs.IQueue],
        functions: Mapping[str, lambda_.IFunction],
        outbox_relay: lambda_.IFunction,
        archiver: lambda_.IFunction | None = None,
    ) -> None:
        t = self.thresholds
        self.alarm(
            "RetryFailureRate",
            self.failure_rate(
                m.RETRY_SUCCESS, m.RETRY_FAILURE, t.retry_failure_window_minutes, "retry failure %"
            ),
            threshold=t.retry_failure_rate_percent,
            description=f"more than {t.retry_failure_rate_percent:g}% of retried attempts failed over "
            f"{t.retry_failure_window_minutes} minutes",
        )
        self.alarm(
            "SchedulingFailureRate",
            self.scheduling_failure_rate(Duration.minutes(t.scheduling_failure_window_minutes)),
            threshold=t.scheduling_failure_rate_percent,
            description=f"more than {t.scheduling_failure_rate_percent:g}% of scheduling failed "
            f"(missed fires and failed retry dispatches) over {t.scheduling_failure_window_minutes} minutes",
        )
        self.add_slo_alarms()
        self.alarm(
            "WorkOrderFailures",
            self.summed(m.WORKORDER_FAILURE, Duration.minutes(5), "work-order failures"),
            threshold=t.workorder_failures,
            comparison=cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            description=f"{t.workorder_failures} or more work orders could not be created in 5 minutes",
        )
        self.alarm(
            "ManualRecoveryCompletion",
            self.app_metric(
                m.WORKORDER_COMPLETION_RATE,
                EMITTERS[m.WORKORDER_COMPLETION_RATE][0],
                statistic="Minimum",
                period=Duration.minutes(15),
            ),
            threshold=t.manual_recovery_completion_percent,
            comparison=cw.ComparisonOperator.LESS_THAN_THRESHOLD,
            evaluation_periods=2,
            description=f"fewer than {t.manual_recovery_completion_percent:g}% of the work orders opened "
            "in the last 7 days are resolved (manual recovery completion), for 30 minutes",
        )
        self.alarm(
            "RetryHealthUnhealthy",
            self.summed(m.HEALTH_ALERTS, Duration.minutes(5), "failing health checks"),
            threshold=1,
            comparison=cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            description="a check of the retry-health report (run every 5 minutes) fails; each failing "
            "check has a work order, resolved when it clears",
        )
        self.alarm(
            "SweeperItemFailures",
            self.summed(m.SWEEPER_FAILURE, Duration.minutes(5), "sweeper failures"),
            threshold=t.sweeper_failures,
            comparison=cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            description=f"{t.sweeper_failures} or more sweeper steps or items failed in 5 minutes "
            "(the rest of each sweep went on)",
        )
        self.alarm(
            "SlaBreaches",
            self.summed(m.SLA_BREACH, Duration.minutes(t.sla_period_minutes), "SLA breaches"),
            threshold=1,
            comparison=cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            evaluation_periods=t.sla_consecutive_breaches,
            description=f"SLA breaches in {t.sla_consecutive_breaches} consecutive "
            f"{t.sla_period_minutes}-minute periods",
        )
        self.alarm(
            "LockContention",
            self.app_metric(
                m.LOCK_CONTENTION,
                EMITTERS[m.LOCK_CONTENTION][0],
                statistic="Average",
                period=Duration.minutes(t.lock_contention_window_minutes),
            ),
            threshold=t.lock_contention_percent,
            description=f"lock contention above {t.lock_contention_percent:g}%",
        )
        for logical, queue in dead_letter_queues.items():
            self.alarm(
                f"{_camel(logical)}Depth",
                queue.metric_approximate_number_of_messages_visible(statistic="Maximum", period=QUEUE_PERIOD),
                threshold=t.dlq_depth,
                comparison=cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                description=f"{t.dlq_depth} or more messages in the {logical} queue",
                runbook=DLQ_RUNBOOK,
            )
            self.alarm(
                f"{_camel(logical)}OldestAge",
                queue.metric_approximate_age_of_oldest_message(statistic="Maximum", period=QUEUE_PERIOD),
                threshold=t.dlq_oldest_age_s,
                description=f"a message in the {logical} queue is older than {t.dlq_oldest_age_s}s; "
                "recover or archive it before the queue's retention deletes it",
                runbook=DLQ_RUNBOOK,
            )
        self.alarm(
            "ExecutionBacklog",
            execution_queue.metric_approximate_age_of_oldest_message(
                statistic="Maximum", period=QUEUE_PERIOD
            ),
            threshold=t.execution_oldest_age_s,
            description=f"runs wait more than {t.execution_oldest_age_s}s on the execution queue",
        )
        self.alarm(
            "OutboxLag",
            outbox_relay.metric("IteratorAge", statistic="Maximum", period=QUEUE_PERIOD),
            threshold=t.outbox_iterator_age_s * 1000,
            description=f"outbox events wait more than {t.outbox_iterator_age_s}s to reach the bus",
        )
        if archiver is not None:
            self.alarm(
                "ArchiveLag",
                archiver.metric("IteratorAge", statistic="Maximum", period=QUEUE_PERIOD),
                threshold=t.archive_iterator_age_s * 1000,
                description=f"audit records wait more than {t.archive_iterator_age_s}s to be archived",
                runbook="archive-failures.md",
            )
        for logical, fn in functions.items():
            self.alarm(
                f"{_camel(logical)}Errors",
                fn.metric_errors(statistic="Sum", period=QUEUE_PERIOD),
                threshold=1,
                comparison=cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                description=f"the {logical} function failed invocations",
                runbook=ERRORS_RUNBOOKS.get(logical),
            )

    def add_capacity_alarms(
        self, tables: Mapping[str, ddb.Table], keep_indexes: tuple[str, ...] = ()
    ) -> None:
        """With provisioned capacity: one alarm per table when its reads or writes, or an index's,
        were throttled in each of three five-minute periods in a row, and a dashboard row of
        every table's throttled requests (call after ``add_dashboard``). A burst is throttled for
        the minutes auto scaling takes to catch up; throttling that lasts 15 minutes means the
        maximum units are too low for the load (docs/runbooks/dynamodb-throttling.md)."""
        graphed: list[cw.IMetric] = []
        for t, spec in enumerate(r.SPEC.tables):
            table = tables[spec.logical]
            using: dict[str, cw.IMetric] = {}
            for kind in ("Read", "Write"):
                # ids unique across the tables: the dashboard graphs every table's sum together
                using[f"{kind[0].lower()}{t}i0"] = table.metric(
                    f"{kind}ThrottleEvents", statistic="Sum", period=QUEUE_PERIOD
                )
                for n, index in enumerate(spec.built_indexes(keep_indexes), start=1):
                    using[f"{kind[0].lower()}{t}i{n}"] = cw.Metric(
                        namespace="AWS/DynamoDB",
                        metric_name=f"{kind}ThrottleEvents",
                        dimensions_map={
                            "TableName": table.table_name,
                            "GlobalSecondaryIndexName": index.name,
                        },
                        statistic="Sum",
                        period=QUEUE_PERIOD,
                    )
            throttled = cw.MathExpression(
                expression=" + ".join(f"FILL({name}, 0)" for name in using),
                using_metrics=using,
                period=QUEUE_PERIOD,
                label=f"{spec.logical} throttled requests",
            )
            graphed.append(throttled)
            self.alarm(
                f"{_camel(spec.logical)}Throttled",
                throttled,
                threshold=0,
                evaluation_periods=THROTTLED_PERIODS,
                description=f"the {spec.logical} table or an index of it was throttled for "
                f"{THROTTLED_PERIODS * 5} minutes (provisioned capacity below the load)",
                runbook=THROTTLING_RUNBOOK,
            )
        self.dashboard.add_widgets(
            cw.GraphWidget(
                title="DynamoDB throttled requests per table (provisioned capacity)",
                left=graphed,
                width=24,
            )
        )

    # --------------------------------------------------------------------------- dashboard
    def summed_average(self, name: str, period: Duration, label: str) -> cw.IMetric:
        return self.app_metric(name, EMITTERS[name][0], statistic="Average", period=period).with_(label=label)


def _camel(logical: str) -> str:
    return "".join(part.capitalize() for part in logical.split("_"))
