"""Manual recovery completion: its alarm below 95 %, and the dashboard's recovery widgets."""

from __future__ import annotations

import pytest
from infra_helpers import Synth
from test_infra_alarms import alarm, app_dims, dashboard_widgets, lines, plain, single_metric

from rebound.engine import telemetry as m
from rebound_infra.telemetry import EMITTERS

pytestmark = pytest.mark.infra


def test_manual_recovery_completion_below_95_percent_for_30_minutes_alarms(synth: Synth, env: str) -> None:
    props = alarm(synth, env, "ManualRecoveryCompletion")
    metric = single_metric(props)
    assert metric["MetricName"] == m.WORKORDER_COMPLETION_RATE
    assert {d["Name"]: d["Value"] for d in metric["Dimensions"]} == app_dims(env, "sweeper")
    assert metric["Stat"] == "Minimum" and metric["Period"] == 900
    assert props["Threshold"] == 95
    assert props["ComparisonOperator"] == "LessThanThreshold"
    assert props["EvaluationPeriods"] == 2 and props["DatapointsToAlarm"] == 2
    assert props["TreatMissingData"] == "notBreaching"  # no work order in 7 days: nothing to judge
    assert props["AlarmDescription"].endswith("manual-recovery-completion.md")


def test_dashboard_shows_completion_resolutions_recoveries_and_time_to_resolve(
    synth: Synth, env: str
) -> None:
    widgets = dashboard_widgets(synth, env)
    (rate,) = lines(widgets["Manual recovery completion, 7 days (%)"])
    assert plain(rate) == ("Rebound", m.WORKORDER_COMPLETION_RATE, app_dims(env, "sweeper"), "Average")
    assert (
        widgets["Manual recovery completion, 7 days (%)"]["properties"]["annotations"]["horizontal"][0][
            "value"
        ]
        == 95
    )
    counted = lines(widgets["Work orders resolved, runs recovered"])
    metrics = {(line.get("metric"), line.get("label")) for line in counted if "metric" in line}
    hidden = {line["metric"] for line in counted if "metric" in line}
    assert m.RETRY_RECOVERED in hidden and m.WORKORDER_RESOLVED in hidden, metrics
    services = {line["dims"]["service"] for line in counted if line.get("metric") == m.WORKORDER_RESOLVED}
    assert services == {app_dims(env, f)["service"] for f in EMITTERS[m.WORKORDER_RESOLVED]}
    took = lines(widgets["Time to resolve a work order (s)"])
    assert {(line["metric"], line["stat"]) for line in took} == {(m.WORKORDER_TIME_TO_RESOLVE, "p50")}
    assert {line["dims"]["service"] for line in took} == {
        app_dims(env, f)["service"] for f in EMITTERS[m.WORKORDER_TIME_TO_RESOLVE]
    }
