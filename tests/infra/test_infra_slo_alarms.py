"""The SLO alarms (issue 16): retry success, on-time and execution success over 1 hour in
burn-rate style (a 1-hour and a 5-minute window, both in alarm, page through a composite), and
scheduling failure over 5 minutes counting missed fires and failed dispatches. Each expression is
evaluated on sample values, so the arithmetic is checked, not only the metric names."""

from __future__ import annotations

from typing import Any

import pytest
from infra_helpers import Synth, flatten, ref_target
from test_infra_alarms import alarm, evaluate, metric_names, single_metric

from rebound.engine import telemetry as m

pytestmark = pytest.mark.infra

SLOS = {
    "RetrySuccessSlo": (90, {m.RETRY_SUCCESS, m.RETRY_FAILURE}),
    "OnTimeSlo": (98, {m.SCHEDULER_ON_TIME}),
    "ExecutionSuccessSlo": (97, {m.EXECUTION_SUCCESS, m.EXECUTION_FAILURE}),
}


def window(synth: Synth, env: str, name: str) -> tuple[str, dict[str, Any]]:
    child = synth.stacks[env].observability.windows[name]
    lid = synth.logical_id(env, child)
    return lid, dict(synth.template(env)["Resources"][lid]["Properties"])


def returned(props: dict[str, Any]) -> str:
    (expression,) = [
        q["Expression"] for q in props["Metrics"] if "Expression" in q and q.get("ReturnData", True)
    ]
    return str(expression)


@pytest.mark.parametrize("name", sorted(SLOS))
def test_an_slo_pages_only_when_its_hour_and_its_last_five_minutes_both_break_it(
    synth: Synth, env: str, name: str
) -> None:
    target, metrics = SLOS[name]
    composite = alarm(synth, env, name)
    topic = synth.logical_id(env, synth.stacks[env].observability.topic)
    assert [ref_target(a) for a in composite["AlarmActions"]] == [topic]
    assert [ref_target(a) for a in composite["OKActions"]] == [topic]
    assert composite["AlarmDescription"].endswith(".md")
    slow_id, slow = window(synth, env, f"{name}Slow")
    fast_id, fast = window(synth, env, f"{name}Fast")
    assert flatten(composite["AlarmRule"]) == (
        f'(ALARM("<GetAtt:{slow_id}.Arn>") AND ALARM("<GetAtt:{fast_id}.Arn>"))'
    )
    for props, period in ((slow, 3600), (fast, 300)):
        assert "AlarmActions" not in props and "OKActions" not in props  # the composite notifies
        assert props["Threshold"] == target
        assert props["ComparisonOperator"] == "LessThanThreshold"
        assert props["TreatMissingData"] == "notBreaching"
        if len(metrics) == 1:
            assert single_metric(props)["MetricName"] in metrics
            assert single_metric(props)["Period"] == period
        else:
            periods = {q["MetricStat"]["Period"] for q in props["Metrics"] if "MetricStat" in q}
            assert periods == {period}
            assert metric_names(props) == metrics


@pytest.mark.parametrize("name", ["RetrySuccessSlo", "ExecutionSuccessSlo"])
def test_a_success_rate_is_successes_over_all_and_100_with_no_event(
    synth: Synth, env: str, name: str
) -> None:
    _, slow = window(synth, env, f"{name}Slow")
    expression = returned(slow)
    ids = {q["Id"]: q["MetricStat"]["Metric"]["MetricName"] for q in slow["Metrics"] if "MetricStat" in q}
    ok = next(i for i, n in ids.items() if n.endswith("success_total"))
    bad = next(i for i, n in ids.items() if n.endswith("failure_total"))
    assert evaluate(expression, {ok: 85, bad: 15}) == 85
    assert evaluate(expression, {ok: 1, bad: 0}) == 100
    assert expression.endswith(", 100)")  # nothing ran: no budget spent (CloudWatch's IF is lazy)


def test_the_on_time_slo_averages_the_on_time_rate(synth: Synth, env: str) -> None:
    for suffix in ("Slow", "Fast"):
        _, props = window(synth, env, f"OnTimeSlo{suffix}")
        metric = single_metric(props)
        assert (metric["MetricName"], metric["Stat"]) == (m.SCHEDULER_ON_TIME, "Average")
        assert metric["Period"] == (3600 if suffix == "Slow" else 300)


def test_scheduling_failure_counts_missed_fires_and_failed_dispatches_over_every_fire_and_dispatch(
    synth: Synth, env: str
) -> None:
    props = alarm(synth, env, "SchedulingFailureRate")
    expression = returned(props)
    stats = {
        q["Id"]: (q["MetricStat"]["Metric"]["MetricName"], q["MetricStat"]["Stat"])
        for q in props["Metrics"]
        if "MetricStat" in q
    }
    assert stats[next(i for i, s in stats.items() if s[0] == m.SCHEDULER_ON_TIME)][1] == "SampleCount"
    by_metric = {
        m.SCHEDULING_SUCCESS: 90.0,  # retry dispatches that went out
        m.SCHEDULING_FAILURE: 2.0,  # retry dispatches that failed
        m.SCHEDULER_MISSED: 3.0,  # fires missed
        m.SCHEDULER_ON_TIME: 5.0,  # first attempts started (the on-time rate's sample count)
    }
    values = {i: by_metric[name] if i.endswith("0") else 0.0 for i, (name, _) in stats.items()}
    assert evaluate(expression, values) == pytest.approx(5.0)  # (2 + 3) / (90 + 2 + 3 + 5)
    assert expression.endswith(", 0)")  # nothing due, nothing dispatched: nothing failed
    assert props["Threshold"] == 5 and props["ComparisonOperator"] == "GreaterThanThreshold"
