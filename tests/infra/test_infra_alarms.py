"""Alarms from ARCHITECTURE.md's Telemetry with the seeds' thresholds, all on the alerts topic; the
dashboard; the topic's encryption. Prod's queue thresholds are tighter than dev's."""

from __future__ import annotations

import json
from typing import Any

import pytest
from infra_helpers import Synth, ref_target

from rebound.engine import telemetry as m
from rebound_infra.telemetry import EMITTERS

pytestmark = pytest.mark.infra


def alarm(synth: Synth, env: str, name: str) -> dict[str, Any]:
    lid = synth.logical_id(env, synth.stacks[env].observability.alarms[name])
    return dict(synth.template(env)["Resources"][lid]["Properties"])


def single_metric(props: dict[str, Any]) -> dict[str, Any]:
    """The watched metric of a one-metric alarm, however CDK rendered it."""
    if "MetricName" in props:
        return {
            "MetricName": props["MetricName"],
            "Namespace": props.get("Namespace"),
            "Dimensions": props.get("Dimensions", []),
            "Stat": props.get("Statistic") or props.get("ExtendedStatistic"),
            "Period": props["Period"],
        }
    (query,) = props["Metrics"]
    stat = query["MetricStat"]
    return {**stat["Metric"], "Stat": stat["Stat"], "Period": stat["Period"]}


def metric_names(props: dict[str, Any]) -> set[str]:
    return {q["MetricStat"]["Metric"]["MetricName"] for q in props.get("Metrics", []) if "MetricStat" in q}


def test_every_alarm_notifies_the_alerts_topic_on_alarm_and_ok(synth: Synth, env: str) -> None:
    topic = synth.logical_id(env, synth.stacks[env].observability.topic)
    alarms = synth.resources(env, "AWS::CloudWatch::Alarm")
    assert alarms
    for props in (a["Properties"] for a in alarms.values()):
        assert [ref_target(a) for a in props["AlarmActions"]] == [topic]
        assert [ref_target(a) for a in props["OKActions"]] == [topic]
        assert props["TreatMissingData"] == "notBreaching"


def test_retry_failure_rate_above_15_percent_over_10_minutes(synth: Synth, env: str) -> None:
    props = alarm(synth, env, "RetryFailureRate")
    assert props["Threshold"] == 15
    assert props["ComparisonOperator"] == "GreaterThanThreshold"
    assert props["EvaluationPeriods"] == 1
    assert {q["MetricStat"]["Period"] for q in props["Metrics"] if "MetricStat" in q} == {600}
    assert metric_names(props) == {m.RETRY_SUCCESS, m.RETRY_FAILURE}
    (expression,) = [q for q in props["Metrics"] if q.get("ReturnData", True) and "Expression" in q]
    assert "100 *" in expression["Expression"]


def test_scheduling_failure_rate_above_5_percent_over_5_minutes(synth: Synth, env: str) -> None:
    props = alarm(synth, env, "SchedulingFailureRate")
    assert props["Threshold"] == 5
    assert {q["MetricStat"]["Period"] for q in props["Metrics"] if "MetricStat" in q} == {300}
    assert metric_names(props) == {m.SCHEDULING_SUCCESS, m.SCHEDULING_FAILURE}
    # Summed over every function that dispatches retries.
    services = {
        d["Value"]
        for q in props["Metrics"]
        if "MetricStat" in q
        for d in q["MetricStat"]["Metric"]["Dimensions"]
        if d["Name"] == "service"
    }
    assert services == set(EMITTERS[m.SCHEDULING_FAILURE])


def test_three_consecutive_sla_breaches(synth: Synth, env: str) -> None:
    props = alarm(synth, env, "SlaBreaches")
    assert metric_names(props) == {m.SLA_BREACH}
    services = {
        d["Value"]
        for q in props["Metrics"]
        if "MetricStat" in q
        for d in q["MetricStat"]["Metric"]["Dimensions"]
        if d["Name"] == "service"
    }
    assert services == set(EMITTERS[m.SLA_BREACH]) == {"executor", "sweeper"}
    assert props["EvaluationPeriods"] == 3
    assert props["DatapointsToAlarm"] == 3
    assert props["Threshold"] == 1
    assert props["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"


def test_lock_contention_above_70_percent(synth: Synth, env: str) -> None:
    props = alarm(synth, env, "LockContention")
    assert single_metric(props)["MetricName"] == m.LOCK_CONTENTION
    assert props["Threshold"] == 70
    assert single_metric(props)["Stat"] == "Average"


def test_any_work_order_creation_failure_alarms(synth: Synth, env: str) -> None:
    props = alarm(synth, env, "WorkOrderFailures")
    assert single_metric(props)["MetricName"] == m.WORKORDER_FAILURE
    assert props["Threshold"] == 1
    assert props["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"


def test_app_metrics_carry_the_dimensions_powertools_writes(synth: Synth, env: str) -> None:
    metric = single_metric(alarm(synth, env, "WorkOrderFailures"))
    assert metric["Namespace"] == "Rebound"
    assert {d["Name"]: d["Value"] for d in metric["Dimensions"]} == {
        "environment": env,
        "service": "escalation",
    }


@pytest.mark.parametrize("queue", ["Dlq", "ControlDlq", "SchedulerDlq"])
def test_dead_letter_queues_alarm_on_depth_and_oldest_age(synth: Synth, queue: str) -> None:
    for env in ("dev", "prod"):
        thresholds = synth.stacks[env].config.alarms
        depth = alarm(synth, env, f"{queue}Depth")
        assert single_metric(depth)["MetricName"] == "ApproximateNumberOfMessagesVisible"
        assert depth["Threshold"] == thresholds.dlq_depth
        age = alarm(synth, env, f"{queue}OldestAge")
        assert single_metric(age)["MetricName"] == "ApproximateAgeOfOldestMessage"
        assert age["Threshold"] == thresholds.dlq_oldest_age_s
        assert age["Threshold"] < 14 * 86400  # before SQS deletes it
    assert (
        alarm(synth, "prod", f"{queue}Depth")["Threshold"] < alarm(synth, "dev", f"{queue}Depth")["Threshold"]
    )
    assert alarm(synth, "prod", f"{queue}OldestAge")["Threshold"] == 86400


def test_alerts_topic_is_encrypted_with_a_rotating_key_cloudwatch_may_use(synth: Synth, env: str) -> None:
    stack = synth.stacks[env]
    topic = synth.template(env)["Resources"][synth.logical_id(env, stack.observability.topic)]["Properties"]
    key_id = synth.logical_id(env, stack.observability.key)
    assert ref_target(topic["KmsMasterKeyId"]) == key_id
    key = synth.template(env)["Resources"][key_id]["Properties"]
    assert key["EnableKeyRotation"] is True
    principals = [st.get("Principal") for st in key["KeyPolicy"]["Statement"]]
    assert {"Service": "cloudwatch.amazonaws.com"} in principals


def test_dashboard_shows_queues_retries_on_time_rate_work_orders_and_executor_health(synth: Synth) -> None:
    (dashboard,) = synth.resources("prod", "AWS::CloudWatch::Dashboard").values()
    body = json.dumps(dashboard["Properties"]["DashboardBody"])
    for needle in (
        "Execution queue",
        "ApproximateAgeOfOldestMessage",
        "Dead-letter queues",
        m.RETRY_SUCCESS,
        m.RETRY_FAILURE,
        m.SCHEDULER_ON_TIME,
        m.WORKORDER_OPENED,
        "Errors",
        "Throttles",
        "Duration",
    ):
        assert needle in body, needle
