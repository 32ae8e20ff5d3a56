"""``rebound slo`` against the local cloud: each SLO measured from the runs the system made."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from test_cli_harness import Cloud, cloud_fixture

from rebound.domain.task import Task
from rebound.ops.tasks import TaskOps

pytestmark = pytest.mark.e2e

slo_cloud = cloud_fixture(transport="direct", name="slo_cloud")


def test_slo_prints_each_objective_with_its_target_value_and_budget(slo_cloud: Cloud) -> None:
    ops = TaskOps(slo_cloud.deps, "test")
    good = Task.model_validate(
        {"id": "good", "tenant": "acme", "schedule": {"cron": "* * * * *"}, "target": {"type": "sim"}}
    )
    flaky = Task.model_validate(
        {
            "id": "flaky",
            "tenant": "acme",
            "schedule": {"cron": "*/10 * * * *"},
            "target": {"type": "sim", "behavior": {"fail_first": 1}},
            "retry_policy": "quick",
        }
    )
    ops.apply(ops.plan([good, flaky]))
    slo_cloud.run_for(timedelta(minutes=30))
    runs = slo_cloud.runs().values()
    attempts = [a for r in runs for a in r.attempts]
    ok = sum(a.outcome is not None and a.outcome.value == "succeeded" for a in attempts)
    failed = sum(a.outcome is not None and a.outcome.value == "failed" for a in attempts)
    assert failed == 3  # flaky's first attempt at 09:00, 09:10 and 09:20

    result = slo_cloud.cli("-o", "json", "slo")
    assert result.exit_code == 3, result.output  # 3 failed attempts of ~35 break execution success
    slos = {s["slo"]: s for s in json.loads(result.stdout)}
    assert set(slos) == {
        "retry success",
        "on-time",
        "execution success",
        "scheduling failure",
        "manual recovery completion",
    }
    assert (slos["retry success"]["good"], slos["retry success"]["bad"]) == (3, 0)
    assert slos["retry success"]["error_budget_left_percent"] == 100.0
    execution = slos["execution success"]
    assert (execution["good"], execution["bad"]) == (ok, 3)
    assert execution["target_percent"] == 97.0 and execution["met"] is False
    assert execution["current_percent"] == round(100 * ok / (ok + 3), 2)
    assert execution["error_budget_left_percent"] == 0.0
    assert slos["on-time"]["bad"] == 0 and slos["on-time"]["met"] is True
    assert slos["scheduling failure"]["bad"] == 0 and slos["scheduling failure"]["comparison"] == "<="
    assert slos["manual recovery completion"]["current_percent"] is None  # no work order opened

    table = slo_cloud.cli("slo").output
    assert "execution success" in table and ">= 97 %" in table and "MISSED" in table
