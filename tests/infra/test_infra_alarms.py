"""Alarms from ARCHITECTURE.md's Telemetry with the seeds' thresholds, all on the alerts topic; the
dashboard; the topic's encryption. Prod's queue thresholds are tighter than dev's."""

from __future__ import annotations

import json
import re
from functools import cache
from typing import Any

import pytest
import yaml
from infra_helpers import Synth, flatten, ref_target

from rebound import resources as r
from rebound.engine import telemetry as m
from rebound.resources import service_name
from rebound_infra.app import REPO_ROOT
from rebound_infra.config import AlarmThresholds
from rebound_infra.constructs.observability import QUEUE_PERIOD
from rebound_infra.telemetry import EMITTERS

RECOVERY_WIDGETS = (
    "Manual recovery completion, 7 days (%)",
    "Work orders resolved, runs recovered",
    "Retry health (every 5 minutes)",
    "Time to resolve a work order (s)",
)
"""Issue 16's widgets; tests/infra/test_infra_recovery_alarms.py checks what they show."""

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
    windows = {synth.logical_id(env, w) for w in synth.stacks[env].observability.windows.values()}
    alarms = {
        lid: a
        for kind in ("AWS::CloudWatch::Alarm", "AWS::CloudWatch::CompositeAlarm")
        for lid, a in synth.resources(env, kind).items()
        if lid not in windows  # a burn-rate window: its composite notifies (test_infra_slo_alarms.py)
    }
    assert alarms
    for props in (a["Properties"] for a in alarms.values()):
        assert [ref_target(a) for a in props["AlarmActions"]] == [topic]
        assert [ref_target(a) for a in props["OKActions"]] == [topic]
        assert props.get("TreatMissingData", "notBreaching") == "notBreaching"  # composites have none


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
    # Missed fires count as scheduling failures (issue 16); fires started make up the whole.
    assert metric_names(props) == {
        m.SCHEDULING_SUCCESS,
        m.SCHEDULING_FAILURE,
        m.SCHEDULER_MISSED,
        m.SCHEDULER_ON_TIME,
    }
    # Summed over every function that dispatches retries.
    services = {
        d["Value"]
        for q in props["Metrics"]
        if "MetricStat" in q and q["MetricStat"]["Metric"]["MetricName"] == m.SCHEDULING_FAILURE
        for d in q["MetricStat"]["Metric"]["Dimensions"]
        if d["Name"] == "service"
    }
    assert services == {service_name(f) for f in EMITTERS[m.SCHEDULING_FAILURE]}


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
    assert (
        services
        == {service_name(f) for f in EMITTERS[m.SLA_BREACH]}
        == {"rebound-executor", "rebound-sweeper"}
    )
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


def test_any_failed_sweeper_step_or_item_alarms(synth: Synth, env: str) -> None:
    props = alarm(synth, env, "SweeperItemFailures")
    metric = single_metric(props)
    assert metric["MetricName"] == m.SWEEPER_FAILURE
    assert {d["Name"]: d["Value"] for d in metric["Dimensions"]} == {
        "environment": env,
        "service": "rebound-sweeper",
    }
    assert props["Threshold"] == 1
    assert props["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
    assert props["AlarmDescription"].endswith("sweeper-item-failures.md")


def test_app_metrics_carry_the_dimensions_powertools_writes(synth: Synth, env: str) -> None:
    metric = single_metric(alarm(synth, env, "WorkOrderFailures"))
    assert metric["Namespace"] == "Rebound"
    assert {d["Name"]: d["Value"] for d in metric["Dimensions"]} == {
        "environment": env,
        "service": "rebound-escalation",
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


# --------------------------------------------------------------------------- thresholds from config


@cache
def configured(env: str) -> dict[str, Any]:
    """The ``alarms`` mapping of ``config/environments/<env>.yaml``, as written (not as the stack read it)."""
    raw = yaml.safe_load((REPO_ROOT / "config" / "environments" / f"{env}.yaml").read_text(encoding="utf-8"))
    return dict(raw["alarms"])


def configured_or_default(env: str, key: str) -> Any:
    alarms = configured(env)
    return alarms[key] if key in alarms else AlarmThresholds.model_fields[key].default


def function_id(synth: Synth, env: str, logical: str) -> str:
    return synth.logical_id(env, synth.stacks[env].functions[logical].function)


def queue_id(synth: Synth, env: str, logical: str) -> str:
    return synth.logical_id(env, synth.stacks[env].messaging.queues[logical])


def test_queue_period_is_five_minutes() -> None:
    assert QUEUE_PERIOD.to_seconds() == 300


def test_execution_backlog_alarms_on_the_configured_oldest_message_age(synth: Synth, env: str) -> None:
    props = alarm(synth, env, "ExecutionBacklog")
    metric = single_metric(props)
    assert metric["Namespace"] == "AWS/SQS"
    assert metric["MetricName"] == "ApproximateAgeOfOldestMessage"
    assert metric["Dimensions"] == [
        {
            "Name": "QueueName",
            "Value": {"Fn::GetAtt": [queue_id(synth, env, r.EXECUTION.logical), "QueueName"]},
        }
    ]
    assert metric["Stat"] == "Maximum"
    assert metric["Period"] == QUEUE_PERIOD.to_seconds()
    assert props["Threshold"] == configured(env)["execution_oldest_age_s"]
    assert props["ComparisonOperator"] == "GreaterThanThreshold"
    assert props["EvaluationPeriods"] == 1
    assert props["DatapointsToAlarm"] == 1


def test_execution_backlog_thresholds_follow_each_environment() -> None:
    # The configs differ, so the per-environment test above tells them apart.
    assert [configured(e)["execution_oldest_age_s"] for e in ("dev", "staging", "prod")] == [1800, 900, 300]


def test_outbox_lag_alarms_on_the_relay_iterator_age_in_milliseconds(synth: Synth, env: str) -> None:
    props = alarm(synth, env, "OutboxLag")
    metric = single_metric(props)
    assert metric["Namespace"] == "AWS/Lambda"
    assert metric["MetricName"] == "IteratorAge"
    assert metric["Dimensions"] == [
        {"Name": "FunctionName", "Value": {"Ref": function_id(synth, env, "outbox_relay")}}
    ]
    assert metric["Stat"] == "Maximum"
    assert metric["Period"] == QUEUE_PERIOD.to_seconds()
    # IteratorAge is in milliseconds, the configuration in seconds.
    assert props["Threshold"] == configured(env)["outbox_iterator_age_s"] * 1000
    assert props["ComparisonOperator"] == "GreaterThanThreshold"
    assert props["EvaluationPeriods"] == 1
    assert props["DatapointsToAlarm"] == 1


def test_every_function_alarms_on_any_error(synth: Synth, env: str) -> None:
    errors = {
        name: a for name, a in synth.stacks[env].observability.alarms.items() if name.endswith("Errors")
    }
    expected = {"".join(p.capitalize() for p in f.logical.split("_")) + "Errors": f for f in r.SPEC.functions}
    assert set(errors) == set(expected)
    for name, spec in expected.items():
        props = alarm(synth, env, name)
        metric = single_metric(props)
        assert metric["Namespace"] == "AWS/Lambda", name
        assert metric["MetricName"] == "Errors", name
        assert metric["Dimensions"] == [
            {"Name": "FunctionName", "Value": {"Ref": function_id(synth, env, spec.logical)}}
        ], name
        assert metric["Stat"] == "Sum", name
        assert metric["Period"] == QUEUE_PERIOD.to_seconds(), name
        assert props["Threshold"] == 1, name
        assert props["ComparisonOperator"] == "GreaterThanOrEqualToThreshold", name
        assert props["EvaluationPeriods"] == 1, name
        assert props["DatapointsToAlarm"] == 1, name


def test_scheduling_failure_rate_alarms_strictly_above_the_configured_rate(synth: Synth, env: str) -> None:
    props = alarm(synth, env, "SchedulingFailureRate")
    assert props["Threshold"] == configured(env)["scheduling_failure_rate_percent"]
    assert props["ComparisonOperator"] == "GreaterThanThreshold"
    assert props["EvaluationPeriods"] == 1
    window = configured(env)["scheduling_failure_window_minutes"] * 60
    assert {q["MetricStat"]["Period"] for q in props["Metrics"] if "MetricStat" in q} == {window}


def test_lock_contention_alarms_above_the_rate_over_its_window(synth: Synth, env: str) -> None:
    props = alarm(synth, env, "LockContention")
    metric = single_metric(props)
    assert metric["Period"] == configured_or_default(env, "lock_contention_window_minutes") * 60 == 300
    assert props["Threshold"] == configured(env)["lock_contention_percent"]
    assert props["ComparisonOperator"] == "GreaterThanThreshold"
    assert props["EvaluationPeriods"] == 1
    assert {d["Name"]: d["Value"] for d in metric["Dimensions"]} == {
        "environment": env,
        "service": service_name(EMITTERS[m.LOCK_CONTENTION][0]),
    }


# --------------------------------------------------------------------------- dashboard


def dashboard_widgets(synth: Synth, env: str) -> dict[str, dict[str, Any]]:
    lid = synth.logical_id(env, synth.stacks[env].observability.dashboard)
    dashboard = synth.template(env)["Resources"][lid]
    assert dashboard["Type"] == "AWS::CloudWatch::Dashboard"
    body = json.loads(flatten(dashboard["Properties"]["DashboardBody"]))
    widgets = {w["properties"]["title"]: w for w in body["widgets"]}
    assert len(widgets) == len(body["widgets"]), "widget titles must be unique"
    return widgets


def lines(widget: dict[str, Any]) -> list[dict[str, Any]]:
    """The widget's metrics as dicts: ``namespace``, ``metric``, ``dims`` and the rendering options
    (``stat`` defaults to Average, as in CloudWatch), or an ``expression`` with its options."""
    out: list[dict[str, Any]] = []
    for row in widget["properties"]["metrics"]:
        options = dict(row[-1]) if isinstance(row[-1], dict) else {}
        head = row[:-1] if isinstance(row[-1], dict) else row
        if not head:
            assert "expression" in options, row
            out.append(options)
            continue
        namespace, name, *dims = head
        assert len(dims) % 2 == 0 and "." not in dims and "..." not in dims, row
        options.setdefault("stat", "Average")
        dimensions = dict(zip(dims[::2], dims[1::2], strict=True))
        out.append({"namespace": namespace, "metric": name, "dims": dimensions, **options})
    return out


def plain(line: dict[str, Any]) -> tuple[Any, ...]:
    return (line["namespace"], line["metric"], line["dims"], line["stat"])


def app_dims(env: str, function: str) -> dict[str, str]:
    """The dimensions Powertools writes for a metric of ``function`` (its spec's logical name)."""
    return {
        "environment": env,
        "service": function if function.startswith("rebound-") else service_name(function),
    }


def evaluate(expression: str, values: dict[str, float]) -> float:
    """A metric math expression of ``IF``, ``FILL`` and arithmetic, on the given metric values."""
    names = set(re.findall(r"\b[A-Za-z_]\w*\b", expression)) - {"IF", "FILL"}
    assert names <= set(values), f"{expression} uses undefined ids {names - set(values)}"
    python = re.sub(r"\bIF\(", "_if(", re.sub(r"\bFILL\(", "_fill(", expression))
    helpers = {"_if": lambda c, a, b: a if c else b, "_fill": lambda x, _d: x}
    return float(eval(python, {"__builtins__": {}}, {**helpers, **values}))


def test_dashboard_has_exactly_the_expected_widgets(synth: Synth, env: str) -> None:
    widgets = dashboard_widgets(synth, env)
    assert set(widgets) == {
        "Execution queue",
        "Dead-letter queues: depth",
        "Dead-letter queues: oldest message (s)",
        "Retry success and failure (%)",
        "Scheduler on-time rate (%)",
        "Work orders opened",
        "Executor errors and throttles",
        "Executor duration (ms)",
        "Alarms",
        *RECOVERY_WIDGETS,
    }
    for title, widget in widgets.items():
        if widget["type"] == "metric":
            assert widget["properties"]["region"] == "<Ref:AWS::Region>", title
            for line in lines(widget):
                assert line.get("period", 300) == 300, (title, line)


def test_dashboard_execution_queue_shows_depth_and_oldest_age_of_the_execution_queue(
    synth: Synth, env: str
) -> None:
    queue = {"QueueName": f"<GetAtt:{queue_id(synth, env, r.EXECUTION.logical)}.QueueName>"}
    depth, age = lines(dashboard_widgets(synth, env)["Execution queue"])
    assert plain(depth) == ("AWS/SQS", "ApproximateNumberOfMessagesVisible", queue, "Maximum")
    assert plain(age) == ("AWS/SQS", "ApproximateAgeOfOldestMessage", queue, "Maximum")
    assert age.get("yAxis") == "right"  # seconds, not messages


@pytest.mark.parametrize(
    ("title", "metric"),
    [
        ("Dead-letter queues: depth", "ApproximateNumberOfMessagesVisible"),
        ("Dead-letter queues: oldest message (s)", "ApproximateAgeOfOldestMessage"),
    ],
)
def test_dashboard_dead_letter_widgets_watch_every_dead_letter_queue(
    synth: Synth, env: str, title: str, metric: str
) -> None:
    dead_letters = [r.EXECUTION_DLQ.logical, r.CONTROL_DLQ.logical, r.SCHEDULER_DLQ.logical]
    assert {q.dead_letter for q in r.SPEC.queues if q.dead_letter} <= set(dead_letters)
    shown = {line["label"]: plain(line) for line in lines(dashboard_widgets(synth, env)[title])}
    assert shown == {
        logical: (
            "AWS/SQS",
            metric,
            {"QueueName": f"<GetAtt:{queue_id(synth, env, logical)}.QueueName>"},
            "Maximum",
        )
        for logical in dead_letters
    }


def test_dashboard_retry_rates_are_success_and_failure_percentages(synth: Synth, env: str) -> None:
    widget_lines = lines(dashboard_widgets(synth, env)["Retry success and failure (%)"])
    hidden = {line["id"]: line for line in widget_lines if "metric" in line}
    for line in hidden.values():
        assert line["visible"] is False
        assert line["namespace"] == "Rebound"
        assert line["stat"] == "Sum"
    success_ids = {i for i, line in hidden.items() if line["metric"] == m.RETRY_SUCCESS}
    failure_ids = {i for i, line in hidden.items() if line["metric"] == m.RETRY_FAILURE}
    assert success_ids | failure_ids == set(hidden)
    assert {hidden[i]["dims"]["service"] for i in success_ids} == {
        service_name(f) for f in EMITTERS[m.RETRY_SUCCESS]
    }
    assert {hidden[i]["dims"]["service"] for i in failure_ids} == {
        service_name(f) for f in EMITTERS[m.RETRY_FAILURE]
    }
    assert all(line["dims"] == app_dims(env, line["dims"]["service"]) for line in hidden.values())
    rates = {line["label"]: line["expression"] for line in widget_lines if "expression" in line}
    assert set(rates) == {"retry success %", "retry failure %"}
    for ok, bad in ((3.0, 1.0), (0.0, 2.0), (5.0, 0.0)):
        values = {**dict.fromkeys(success_ids, ok), **dict.fromkeys(failure_ids, bad)}
        success = evaluate(rates["retry success %"], values)
        failure = evaluate(rates["retry failure %"], values)
        assert success == pytest.approx(100 * ok / (ok + bad))
        assert failure == pytest.approx(100 * bad / (ok + bad))
    for expression in rates.values():
        assert expression.startswith("IF("), expression  # no division by zero when nothing ran


def test_dashboard_on_time_rate_is_the_average_of_the_scheduler_on_time_metric(
    synth: Synth, env: str
) -> None:
    (line,) = lines(dashboard_widgets(synth, env)["Scheduler on-time rate (%)"])
    (service,) = EMITTERS[m.SCHEDULER_ON_TIME]
    assert plain(line) == ("Rebound", m.SCHEDULER_ON_TIME, app_dims(env, service), "Average")


def test_dashboard_work_orders_opened_sums_the_opened_metric(synth: Synth, env: str) -> None:
    (line,) = lines(dashboard_widgets(synth, env)["Work orders opened"])
    (service,) = EMITTERS[m.WORKORDER_OPENED]
    assert plain(line) == ("Rebound", m.WORKORDER_OPENED, app_dims(env, service), "Sum")


def test_dashboard_executor_widgets_watch_the_executor_function(synth: Synth, env: str) -> None:
    widgets = dashboard_widgets(synth, env)
    executor = {"FunctionName": f"<Ref:{function_id(synth, env, 'executor')}>"}
    assert [plain(line) for line in lines(widgets["Executor errors and throttles"])] == [
        ("AWS/Lambda", "Errors", executor, "Sum"),
        ("AWS/Lambda", "Throttles", executor, "Sum"),
    ]
    assert [plain(line) for line in lines(widgets["Executor duration (ms)"])] == [
        ("AWS/Lambda", "Duration", executor, stat) for stat in ("p50", "p99", "Maximum")
    ]


def test_dashboard_alarm_widget_lists_every_alarm(synth: Synth, env: str) -> None:
    widget = dashboard_widgets(synth, env)["Alarms"]
    assert widget["type"] == "alarm"
    alarm_ids = set(synth.resources(env, "AWS::CloudWatch::Alarm")) | set(
        synth.resources(env, "AWS::CloudWatch::CompositeAlarm")
    )
    assert sorted(widget["properties"]["alarms"]) == sorted(f"<GetAtt:{a}.Arn>" for a in alarm_ids)


def test_the_cost_model_counts_the_alarms_and_dashboards_the_stack_creates(synth: Synth, env: str) -> None:
    """docs/cost.md's idle line bills these by the month: the model must follow the stack."""
    from rebound_local.pricing import IDLE_RESOURCES

    assert len(synth.resources(env, "AWS::CloudWatch::Alarm")) == IDLE_RESOURCES["alarms"]
    composites = synth.resources(env, "AWS::CloudWatch::CompositeAlarm")
    assert len(composites) == IDLE_RESOURCES["composite_alarms"]
    assert len(synth.resources(env, "AWS::CloudWatch::Dashboard")) == IDLE_RESOURCES["dashboards"]
