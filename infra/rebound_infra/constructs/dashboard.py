"""The environment's CloudWatch dashboard: queues, runs, retries, work orders and the SLOs, built from
the same metrics as the alarms (a mixin of ``Observability``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sqs as sqs

from rebound.engine import telemetry as m
from rebound_infra.config import AlarmThresholds
from rebound_infra.telemetry import EMITTERS


class DashboardBuilder:
    """``Observability.add_dashboard``."""

    if TYPE_CHECKING:  # what it uses of ``Observability``
        total: Callable[..., tuple[str, dict[str, cw.IMetric]]]
        summed: Callable[..., cw.IMetric]
        summed_average: Callable[..., cw.IMetric]
        app_metric: Callable[..., cw.Metric]
        success_rate: Callable[..., cw.MathExpression]
        scheduling_failure_rate: Callable[..., cw.MathExpression]
        dashboard: cw.Dashboard
        alarms: dict[str, cw.AlarmBase]
        windows: dict[str, cw.Alarm]
        thresholds: AlarmThresholds

    def add_dashboard(
        self,
        *,
        execution_queue: sqs.IQueue,
        dead_letter_queues: Mapping[str, sqs.IQueue],
        executor: lambda_.IFunction,
    ) -> None:
        period = Duration.minutes(5)
        ok, ok_metrics = self.total(m.RETRY_SUCCESS, "s", period)
        bad, bad_metrics = self.total(m.RETRY_FAILURE, "f", period)
        using = {**ok_metrics, **bad_metrics}
        retry_rates = [
            cw.MathExpression(
                expression=f"IF(({ok} + {bad}) > 0, 100 * {part} / ({ok} + {bad}), 0)",
                using_metrics=using,
                period=period,
                label=label,
            )
            for part, label in ((ok, "retry success %"), (bad, "retry failure %"))
        ]
        width = 8
        self.dashboard.add_widgets(
            cw.GraphWidget(
                title="Execution queue",
                left=[
                    execution_queue.metric_approximate_number_of_messages_visible(
                        statistic="Maximum", period=period
                    )
                ],
                right=[
                    execution_queue.metric_approximate_age_of_oldest_message(
                        statistic="Maximum", period=period
                    )
                ],
                width=width,
            ),
            cw.GraphWidget(
                title="Dead-letter queues: depth",
                left=[
                    q.metric_approximate_number_of_messages_visible(
                        statistic="Maximum", period=period, label=name
                    )
                    for name, q in dead_letter_queues.items()
                ],
                width=width,
            ),
            cw.GraphWidget(
                title="Dead-letter queues: oldest message (s)",
                left=[
                    q.metric_approximate_age_of_oldest_message(statistic="Maximum", period=period, label=name)
                    for name, q in dead_letter_queues.items()
                ],
                width=width,
            ),
        )
        self.dashboard.add_widgets(
            cw.GraphWidget(title="Retry success and failure (%)", left=retry_rates, width=width),
            cw.GraphWidget(
                title="Scheduler on-time rate (%)",
                left=[self.summed_average(m.SCHEDULER_ON_TIME, period, "on time %")],
                width=width,
            ),
            cw.GraphWidget(
                title="Work orders opened",
                left=[self.summed(m.WORKORDER_OPENED, period, "opened")],
                width=width,
            ),
        )
        self.dashboard.add_widgets(
            cw.GraphWidget(
                title="Executor errors and throttles",
                left=[
                    executor.metric_errors(statistic="Sum", period=period),
                    executor.metric_throttles(statistic="Sum", period=period),
                ],
                width=width,
            ),
            cw.GraphWidget(
                title="Executor duration (ms)",
                left=[
                    executor.metric_duration(statistic="p50", period=period),
                    executor.metric_duration(statistic="p99", period=period),
                    executor.metric_duration(statistic="Maximum", period=period),
                ],
                width=width,
            ),
            cw.AlarmStatusWidget(
                title="Alarms", alarms=[*self.alarms.values(), *self.windows.values()], width=width
            ),
        )
        self.dashboard.add_widgets(
            cw.GraphWidget(
                title="Manual recovery completion, 7 days (%)",
                left=[self.summed_average(m.WORKORDER_COMPLETION_RATE, period, "resolved / opened %")],
                left_annotations=[
                    cw.HorizontalAnnotation(
                        value=self.thresholds.manual_recovery_completion_percent, label="target"
                    )
                ],
                width=width,
            ),
            cw.GraphWidget(
                title="Work orders resolved, runs recovered",
                left=[
                    self.summed(m.WORKORDER_RESOLVED, period, "work orders resolved"),
                    self.summed(m.RETRY_RECOVERED, period, "runs recovered after a failure"),
                ],
                width=width,
            ),
            cw.GraphWidget(
                title="Retry health (every 5 minutes)",
                left=[
                    self.summed(m.HEALTH_REPORTS, period, "health reports"),
                    self.summed(m.HEALTH_ALERTS, period, "health alerts (failing checks)"),
                    self.summed(m.DELIVERY_RETRY_PLANS, period, "delivery-retry plans"),
                    self.summed(m.RETRYABLE_DELIVERIES, period, "retryable deliveries"),
                ],
                width=width,
            ),
            cw.GraphWidget(
                title="Time to resolve a work order (s)",
                left=[
                    self.app_metric(m.WORKORDER_TIME_TO_RESOLVE, svc, statistic="p50", period=period).with_(
                        label=f"p50 ({svc})"
                    )
                    for svc in EMITTERS[m.WORKORDER_TIME_TO_RESOLVE]
                ],
                width=width,
            ),
        )
