"""``rebound tasks dryrun``, the pre-flight ``tasks apply`` runs first, and ``rebound sla report``
against the local cloud."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from test_cli_harness import Cloud, cloud_fixture

from rebound.domain.timefmt import iso
from rebound.engine.sla import counter_key
from rebound.ops.sla_report import counter_subject

pytestmark = pytest.mark.e2e

preflight_cloud = cloud_fixture(transport="direct", name="preflight_cloud")


def task_file(tmp_path: Path, *tasks: dict[str, object], tenants: dict[str, object] | None = None) -> str:
    path = tmp_path / "tasks.yaml"
    path.write_text(yaml.safe_dump({"tasks": list(tasks), "tenants": tenants or {}}))
    return str(path)


def load(task_id: str, minute: int, seconds: float, **extra: object) -> dict[str, object]:
    return {
        "id": task_id,
        "tenant": "acme",
        "schedule": {"cron": f"{minute} * * * *"},
        "target": {"type": "sim", "behavior": {"duration_s": seconds}},
        "timeout_s": 200,
        "mutex_group": "warehouse",
        **extra,
    }


def test_dryrun_warns_with_the_instant_and_the_tasks_and_changes_nothing(
    preflight_cloud: Cloud, tmp_path: Path
) -> None:
    path = task_file(tmp_path, load("pf-orders", 0, 150), load("pf-invoices", 1, 60))
    data = preflight_cloud.json("tasks", "dryrun", "-f", path, "--window", "3h")
    mutex = [w for w in data["warnings"] if w["kind"] == "mutex"]
    now = preflight_cloud.clock.now()
    first_hour = now.replace(minute=1, second=0, microsecond=0)
    if first_hour <= now:
        first_hour += timedelta(hours=1)
    expected = [iso(first_hour + timedelta(hours=n)) for n in range(3)]
    assert [w["at"] for w in mutex] == expected  # each hour, as the second load arrives
    assert all(w["tasks"] == ["acme.pf-invoices", "acme.pf-orders"] for w in mutex)
    assert {t["task_id"]: t["fires"] for t in data["tasks"]} == {"acme.pf-orders": 3, "acme.pf-invoices": 3}
    assert preflight_cloud.deps.store.get_task("acme.pf-orders") is None

    table = preflight_cloud.ok("tasks", "dryrun", "-f", path, "--window", "3h").output
    assert f"{expected[0]} mutex: mutex group acme.warehouse" in table
    assert "3 pre-flight warning(s)" in table
    # the same warning for the same tasks again is counted, not printed again
    assert f"... and 2 more like it, the last at {expected[2]}" in table
    assert f"{expected[1]} mutex" not in table
    assert preflight_cloud.cli("tasks", "dryrun", "-f", path, "--fail-on-warnings").exit_code == 3

    bad = preflight_cloud.cli("tasks", "dryrun", "-f", path, "--window", "30d")
    assert bad.exit_code == 2 and "--window: between 1m and 7d" in bad.output


def test_apply_shows_the_warnings_and_refuses_only_when_told(preflight_cloud: Cloud, tmp_path: Path) -> None:
    path = task_file(tmp_path, load("ap-orders", 30, 150), load("ap-invoices", 31, 60))
    refused = preflight_cloud.cli("-o", "json", "tasks", "apply", "-f", path, "--fail-on-warnings")
    assert refused.exit_code == 3
    assert json.loads(refused.stdout)["applied"] is None
    assert preflight_cloud.deps.store.get_task("acme.ap-orders") is None

    applied = preflight_cloud.ok("tasks", "apply", "-f", path, "--yes")
    assert "mutex group acme.warehouse" in applied.output and "applied: 2 created" in applied.output
    assert preflight_cloud.deps.store.get_task("acme.ap-orders") is not None

    quiet = preflight_cloud.json("tasks", "apply", "-f", path, "--no-preflight")
    assert quiet["preflight"] is None


def test_sla_report_from_the_runs_and_a_rebuild_of_the_counters(
    preflight_cloud: Cloud, tmp_path: Path
) -> None:
    slow = {
        "id": "sla-slow",
        "tenant": "globex",
        "schedule": {"cron": "*/10 * * * *"},
        "target": {"type": "sim", "behavior": {"duration_s": 40}},
        "timeout_s": 60,
        "sla": {"max_duration": "30s"},
    }
    fine = {**slow, "id": "sla-fine", "target": {"type": "sim", "behavior": {"ok": True}}}
    preflight_cloud.ok("tasks", "apply", "-f", task_file(tmp_path, slow, fine), "--no-preflight", "--yes")
    preflight_cloud.run_for(timedelta(minutes=35))

    data = preflight_cloud.json("sla", "report", "--since", "30m", "--tenant", "globex")
    rows = {t["name"]: t for t in data["tasks"]}
    assert set(rows) == {"globex.sla-fine", "globex.sla-slow"}
    slow_row = rows["globex.sla-slow"]
    assert slow_row["scheduled"] == slow_row["on_time"] == 3  # every run started on time
    assert slow_row["sla_breaches"]["duration"] == 3 and slow_row["breaching_runs"] == 3
    assert rows["globex.sla-fine"]["sla_breaches"] == {"start_delay": 0, "duration": 0}
    assert data["tenants"][0]["name"] == "globex" and data["tenants"][0]["on_time_percent"] == 100.0

    deps = preflight_cloud.deps
    uow = deps.store.unit_of_work("test", preflight_cloud.clock.now())
    uow.set_streak(
        counter_key("globex.sla-slow"), 0, None, "sla counter globex.sla-slow"
    )  # a counter gone wrong
    uow.commit()
    rebuilt = preflight_cloud.json(
        "sla", "report", "--since", "30m", "--tenant", "globex", "--rebuild", "--yes"
    )
    assert rebuilt["source"] == "rebuilt"
    counters = {c["task_id"]: c for c in rebuilt["counters"]}
    assert counters["globex.sla-slow"] == {
        "task_id": "globex.sla-slow",
        "before": 0,
        "after": 3,
        "rewritten": True,
    }
    assert (deps.store.get_key(counter_key("globex.sla-slow")) or {})["consecutive"] == 3
    assert [r.action for r in deps.store.audit_trail(counter_subject("globex.sla-slow"))] == [
        "sla-counter-rebuilt"
    ]

    table = preflight_cloud.ok("-o", "table", "sla", "report", "--since", "30m", "--tenant", "globex").output
    assert "by task" in table and "sla-slow" in table

    # ap-invoices (the apply test's) waited for the warehouse at 09:31: acme is late, the total too
    everyone = preflight_cloud.cli("sla", "report", "--since", "30m")
    assert everyone.exit_code == 3 and "on time missed" in everyone.output
