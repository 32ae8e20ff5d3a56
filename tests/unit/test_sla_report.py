"""The SLA report (``rebound.ops.sla_report``) on known runs: known on-time rates, missed fires,
breaches by task and tenant, start delay percentiles; and ``--rebuild`` recomputing breaches and
rewriting the streak counters, audited."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from fakes import MemoryWorld, memory_deps

from rebound.domain.audit import verify_chain
from rebound.domain.errors import ValidationFailed
from rebound.domain.run import Run, RunState
from rebound.engine.sla import counter_key
from rebound.ops.sla_report import SlaReportOps, counter_subject, percentile
from rebound.ops.slo import MISSED_MARK
from support import START, register, save_runs, scheduled_run, task

pytestmark = pytest.mark.unit
NOW = START + timedelta(hours=2)


def run(
    task_id: str,
    tenant: str,
    due_min: int,
    *,
    catch_up: bool = False,
    message: str | None = None,
    breaches: tuple[str, ...] = (),
    **fields: Any,
) -> Run:
    due = START + timedelta(minutes=due_min)
    return scheduled_run(
        task_id,
        due,
        tenant=tenant,
        run_id=f"{task_id}-{due_min}",
        due_at=None if catch_up else due,
        catch_up=catch_up,
        last_error_message=message,
        sla_breaches=list(breaches),
        **fields,
    )


@pytest.fixture
def world() -> MemoryWorld:
    w = memory_deps()
    register(
        w.deps,
        task("a", sla={"max_start_delay": "30s", "max_duration": "60s"}),
        task("b", tenant="beta"),
    )
    save_runs(
        w.deps,
        run("a", "acme", 10, start_s=5, took_s=20),  # on time, within its limits
        run("a", "acme", 20, start_s=45, breaches=("start_delay",)),  # on time (60 s), but over 30 s
        run("a", "acme", 30, start_s=120, took_s=90, breaches=("start_delay", "duration")),  # late
        run("a", "acme", 40, start_s=600, catch_up=True),  # missed, caught up; its breach not recorded
        run("a", "acme", 50, state=RunState.SKIPPED, message=MISSED_MARK),  # missed, recorded skipped
        run("a", "acme", 55, state=RunState.SKIPPED, message="task paused"),  # skipped on purpose
        run("b", "beta", 15, start_s=2),  # on time
        run("b", "beta", 100, state=RunState.PENDING),  # due 20 min ago, not started: late
    )
    w.clock.set(NOW)
    return w


def figures(rows: list[dict[str, object]], name: str) -> dict[str, object]:
    return next(r for r in rows if r["name"] == name)


def test_known_runs_give_known_figures_by_task_tenant_and_in_total(world: MemoryWorld) -> None:
    data = SlaReportOps(world.deps).report("2h").as_dict()

    a = figures(data["tasks"], "a")
    assert (a["scheduled"], a["on_time"], a["late"], a["missed_fires"]) == (6, 2, 3, 2)
    assert a["on_time_percent"] == 40.0 and a["on_time_met"] is False
    assert (a["start_delay_p50_s"], a["start_delay_p99_s"]) == (45.0, 120.0)  # the catch-up left out
    assert a["sla_breaches"] == {"start_delay": 2, "duration": 1} and a["breaching_runs"] == 2
    assert a["start_delay_met"] is True  # 120 s is within the 5 min objective

    b = figures(data["tasks"], "b")
    assert (b["scheduled"], b["on_time"], b["late"], b["on_time_percent"]) == (2, 1, 1, 50.0)
    assert (b["start_delay_p50_s"], b["start_delay_p99_s"]) == (2.0, 2.0)

    assert [t["name"] for t in data["tenants"]] == ["acme", "beta"]
    assert figures(data["tenants"], "acme")["on_time"] == 2
    total = data["total"]
    assert (total["scheduled"], total["on_time"], total["late"], total["missed_fires"]) == (8, 3, 4, 2)
    assert total["on_time_percent"] == pytest.approx(42.86)
    assert data["source"] == "recorded" and data["counters"] == []


def test_a_tenant_filter_reports_only_that_tenants_tasks(world: MemoryWorld) -> None:
    data = SlaReportOps(world.deps).report("2h", tenant="beta").as_dict()
    assert [t["name"] for t in data["tasks"]] == ["b"]
    assert data["total"]["scheduled"] == 2


def test_runs_due_before_the_window_are_left_out(world: MemoryWorld) -> None:
    data = SlaReportOps(world.deps).report("75m").as_dict()  # from 09:45: a's 50 and 55, b's 100
    assert figures(data["tasks"], "a")["scheduled"] == 2
    assert figures(data["tasks"], "b")["scheduled"] == 1


def test_rebuild_recomputes_breaches_and_rewrites_the_streak_counter_with_an_audit_record(
    world: MemoryWorld,
) -> None:
    uow = world.store.unit_of_work("executor", NOW)
    uow.count_streak(counter_key("a"), "a-20", "sla counter a")
    uow.commit()

    report = SlaReportOps(world.deps, "arn:aws:iam::1:user/ops").report("2h", rebuild=True)
    data = report.as_dict()
    a = figures(data["tasks"], "a")
    assert a["sla_breaches"] == {"start_delay": 3, "duration": 1}  # the catch-up's start, unrecorded
    assert data["source"] == "rebuilt"
    assert data["counters"] == [{"task_id": "a", "before": 1, "after": 3, "rewritten": True}]
    counter = world.store.get_key(counter_key("a")) or {}
    assert (counter["consecutive"], counter["last_run"]) == (3, "a-40")
    trail = world.store.audit_trail(counter_subject("a"))
    assert [(r.action, r.actor) for r in trail] == [("sla-counter-rebuilt", "arn:aws:iam::1:user/ops")]
    assert trail[0].evidence["consecutive_before"] == 1 and trail[0].evidence["consecutive_after"] == 3
    assert verify_chain(counter_subject("a"), trail).ok

    again = SlaReportOps(world.deps).report("2h", rebuild=True).as_dict()
    assert again["counters"] == [{"task_id": "a", "before": 3, "after": 3, "rewritten": False}]
    assert len(world.store.audit_trail(counter_subject("a"))) == 1
    assert world.store.get_run("a-40").sla_breaches == []  # type: ignore[union-attr]  # runs untouched


def test_a_since_out_of_range_or_unreadable_is_refused_naming_since(world: MemoryWorld) -> None:
    with pytest.raises(ValidationFailed, match="since: between 1m and 35d"):
        SlaReportOps(world.deps).report("90d")
    with pytest.raises(ValidationFailed, match="since: expected a timestamp"):
        SlaReportOps(world.deps).report("last week")


def test_the_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert (percentile(values, 50), percentile(values, 99), percentile([], 50)) == (50.0, 99.0, None)
    assert percentile([7.0], 99) == 7.0
