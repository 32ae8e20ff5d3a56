"""The ops API's pre-flight and SLA routes: the real handler on real-shaped API Gateway events,
against moto. ``test_ops_api_rights`` records the AWS calls each of these tests makes."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from test_ops_api import ALICE, call, ok

from rebound import wiring
from rebound.engine.deps import Deps
from rebound.engine.sla import counter_key
from rebound.ops.sla_report import counter_subject
from support import START, ManualClock, register, save_runs, scheduled_run, task

pytestmark = pytest.mark.integration


@pytest.fixture
def api(deps: Deps) -> Iterator[Any]:
    from rebound.handlers import ops_api

    wiring.use(deps)
    yield ops_api
    wiring.use(None)


def hourly(task_id: str, **extra: Any) -> dict[str, Any]:
    return {
        "id": task_id,
        "tenant": "acme",
        "schedule": {"cron": "0 * * * *"},
        "target": {"type": "sim", "behavior": {"duration_s": 120}},
        "timeout_s": 270,
        **extra,
    }


def test_the_dry_run_route_warns_of_a_mutex_conflict_and_registers_nothing(api: Any, deps: Deps) -> None:
    document = {"tasks": [hourly("a", mutex_group="m"), hourly("b", mutex_group="m")], "tenants": {}}
    data = ok(api, "POST", "/tasks/dryrun", {"document": document, "window": "3h"})
    mutex = [w for w in data["warnings"] if w["kind"] == "mutex"]
    assert len(mutex) == 3 and mutex[0]["tasks"] == ["acme.a", "acme.b"]
    assert mutex[0]["at"] == "2026-03-07T10:00:00.000Z"
    assert data["fires_total"] == 6
    assert deps.store.list_tasks() == []  # nothing registered


def test_the_dry_run_route_names_a_bad_window_and_a_bad_task(api: Any, deps: Deps) -> None:
    status, data = call(api, "POST", "/tasks/dryrun", {"document": {"tasks": [hourly("a")]}, "window": "9d"})
    assert status == 400 and "window: between 1m and 7d" in data["message"]
    bad = {"tasks": [hourly("a", timeout_s=999)]}
    status, data = call(api, "POST", "/tasks/dryrun", {"document": bad})
    assert status == 400 and "tasks[0].timeout_s" in data["message"]


def test_the_sla_report_and_its_rebuild_by_the_caller(api: Any, deps: Deps, clock: ManualClock) -> None:
    register(deps, task("a", sla={"max_start_delay": "30s"}))
    save_runs(deps, scheduled_run("a", START + timedelta(minutes=10), start_s=90, took_s=5, run_id="a-late"))
    clock.set(START + timedelta(hours=1))

    report = ok(api, "GET", "/sla/report", query={"since": "2h", "tenant": "acme"})
    assert report["total"]["late"] == 1 and report["total"]["on_time_percent"] == 0.0
    assert report["tasks"][0]["sla_breaches"] == {"start_delay": 0, "duration": 0}  # none recorded
    assert report["tasks"][0]["start_delay_p99_s"] == 90.0

    rebuilt = ok(api, "POST", "/sla/rebuild", {"since": "2h"})
    assert rebuilt["tasks"][0]["sla_breaches"]["start_delay"] == 1
    assert rebuilt["counters"] == [{"task_id": "a", "before": 0, "after": 1, "rewritten": True}]
    assert (deps.store.get_key(counter_key("a")) or {})["consecutive"] == 1
    assert [r.actor for r in deps.store.audit_trail(counter_subject("a"))] == [ALICE]

    status, data = call(api, "GET", "/sla/report", query={"since": "yesterday-ish"})
    assert status == 400 and data["message"].startswith("since: expected a timestamp")
