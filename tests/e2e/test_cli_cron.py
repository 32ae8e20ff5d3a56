"""Unix cron as a new user writes it, through ``rebound tasks apply`` against the local cloud: each schedule
is read back from the Scheduler API and its fires, by an AWS cron evaluator independent of Rebound
(``tests/cron_oracle.py``), are croniter's over a year; a split says so; a cron that never fires is
refused."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import boto3
import pytest
import yaml
from test_cli_harness import Cloud, cloud_fixture

from cron_oracle import aws_fires, croniter_fires, differences

pytestmark = pytest.mark.e2e
local_cloud = cloud_fixture()

DEPLOYED = {
    # day-of-month 31 never comes in February, so Unix cron fires on its Sundays
    "0 0 31 2 0": ["cron(0 0 ? 2 SUN *)"],
    # valid Unix cron, each once refused
    "5-5 * * * *": ["cron(5 * * * ? *)"],
    "59-59/15 * * * *": ["cron(59 * * * ? *)"],
    "1-1,59/15,55-59/2 * * * *": ["cron(1,55,57,59 * * * ? *)"],
    "0 0 * JAN-JAN *": ["cron(0 0 * 1 ? *)"],
    "* * * 1-1,12/6,11-12/1 *": ["cron(* * * 1,11,12 ? *)"],
    "* * * * *,0": ["cron(* * * * ? *)"],
    # day-of-month OR day-of-week: one schedule for each
    "0 9 1 * MON": ["cron(0 9 1 * ? *)", "cron(0 9 ? * MON *)"],
}


def task(number: int, expr: str) -> dict[str, object]:
    return {
        "id": f"cron-{number}",
        "tenant": "acme",
        "schedule": {"cron": expr, "timezone": "Europe/Berlin"},
        "target": {"type": "sim", "behavior": {"ok": True}},
    }


def test_each_cron_is_deployed_to_fire_as_unix_cron_does(local_cloud: Cloud, tmp_path: Path) -> None:
    path = tmp_path / "cron.yaml"
    path.write_text(yaml.safe_dump({"tasks": [task(i, expr) for i, expr in enumerate(DEPLOYED)]}))
    applied = local_cloud.json("tasks", "apply", "-f", str(path), "--yes")
    assert len(applied["applied"]["created"]) == len(DEPLOYED)

    scheduler = boto3.client("scheduler", endpoint_url=local_cloud.stack.cloud.endpoint_url)
    group = local_cloud.deps.schedules.group
    first, last = date(2027, 1, 1), date(2028, 1, 1)
    for i, (expr, expected) in enumerate(DEPLOYED.items()):
        name = f"task-acme.cron-{i}"
        listed = scheduler.list_schedules(GroupName=group, NamePrefix=name)["Schedules"]
        mine = [s["Name"] for s in listed if s["Name"] == name or s["Name"].startswith(f"{name}-")]
        live = [scheduler.get_schedule(Name=n, GroupName=group) for n in mine]
        assert sorted(s["ScheduleExpression"] for s in live) == sorted(expected), expr
        assert {s["ScheduleExpressionTimezone"] for s in live} == {"Europe/Berlin"}
        unix, aws = croniter_fires(expr, first, last), aws_fires(expected, first, last)
        assert unix and unix == aws, (expr, differences(unix, aws))


def test_a_split_or_a_dropped_part_is_said_by_show_and_preview(local_cloud: Cloud, tmp_path: Path) -> None:
    path = tmp_path / "split.yaml"
    tasks = [task(90, "0 9 1 * MON"), task(91, "0 0 31 2 0"), task(92, "5-5 * * * *")]
    path.write_text(yaml.safe_dump({"tasks": tasks}))
    local_cloud.ok("tasks", "apply", "-f", str(path), "--yes")

    either = local_cloud.json("tasks", "show", "cron-90")["schedule_notes"]
    assert len(either) == 1 and "fires on a day matching either" in either[0]
    shown = local_cloud.ok("tasks", "show", "cron-90").stdout
    assert "note: day-of-month and day-of-week are both restricted" in shown
    previewed = local_cloud.ok("tasks", "preview", "cron-90", "--count", "2")
    assert "note: day-of-month and day-of-week are both restricted" in previewed.stderr

    sundays = local_cloud.json("tasks", "show", "cron-91")["schedule_notes"]
    assert sundays == [
        "day-of-month and day-of-week are both restricted, so Unix cron fires on a day matching either; "
        "day(s) 31 never occur in FEB, so only the day-of-week part is scheduled"
    ]
    as_json = local_cloud.cli("-o", "json", "tasks", "preview", "cron-91", "--count", "2")
    assert "only the day-of-week part is scheduled" in as_json.stderr
    assert all(row["local"][5:7] == "02" for row in yaml.safe_load(as_json.stdout))

    assert "note:" not in local_cloud.ok("tasks", "show", "cron-92").stdout
    assert "note:" not in local_cloud.ok("tasks", "preview", "cron-92", "--count", "2").stderr


def test_a_cron_that_never_fires_is_refused_naming_the_field(local_cloud: Cloud, tmp_path: Path) -> None:
    path = tmp_path / "never.yaml"
    path.write_text(yaml.safe_dump({"tasks": [task(99, "* * 31 2 *")]}))
    refused = local_cloud.cli("tasks", "apply", "-f", str(path))
    assert refused.exit_code == 2
    assert "(day-of-month field): day(s) 31 never occur in FEB, so it never fires" in refused.stderr
    assert local_cloud.cli("tasks", "show", "cron-99").exit_code == 4
