"""The pre-flight dry run (``rebound.ops.preflight``) on the in-memory store: fires, run windows,
collisions where windows overlap (mutex groups, a task's own slot, tenants' quotas, workstream
resources), quota headroom, catch-up storms, and the hit rate against recorded collisions."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from fakes import MemoryWorld, memory_deps

from rebound.config.loader import parse_task_document
from rebound.domain.errors import ValidationFailed
from rebound.domain.ids import scheduled_run_id
from rebound.domain.prediction.hit_rate import Collision, hit_rate
from rebound.domain.prediction.preflight import PreflightWarning
from rebound.domain.task import TaskState
from rebound.domain.timefmt import parse_utc
from rebound.domain.workstreams import TaskDocument
from rebound.ops.preflight import PreflightOps, parse_window
from support import START, register, save_runs, scheduled_run, task

pytestmark = pytest.mark.unit


@pytest.fixture
def world() -> MemoryWorld:
    return memory_deps()


def hourly(task_id: str, minute: int = 0, duration_s: float = 120, **extra: Any) -> dict[str, Any]:
    return {
        "id": task_id,
        "tenant": "acme",
        "schedule": {"cron": f"{minute} * * * *"},
        "target": {"type": "sim", "behavior": {"duration_s": duration_s}},
        "timeout_s": 270,
        **extra,
    }


def dryrun(world: MemoryWorld, document: dict[str, Any], window: str = "24h") -> Any:
    ops = PreflightOps(world.deps)
    return ops.dryrun(ops.parse(document), parse_window(window))


def kinds(report: Any) -> list[str]:
    return [w.kind for w in report.warnings]


def test_two_tasks_of_one_mutex_group_firing_together_are_warned_each_hour_with_the_instant(
    world: MemoryWorld,
) -> None:
    report = dryrun(world, {"tasks": [hourly("a", mutex_group="ledger"), hourly("b", mutex_group="ledger")]})

    mutex = [w for w in report.warnings if w.kind == "mutex"]
    assert len(mutex) == 24  # one span an hour over 24 h, none between
    first = mutex[0]
    assert first.at == START + timedelta(hours=1)  # the first fire after now (09:00)
    assert first.tasks == ("acme.a", "acme.b")  # task keys: <tenant>.<id>
    assert set(first.runs) == {scheduled_run_id(t, first.at) for t in ("acme.a", "acme.b")}
    assert first.detail["longest_wait_s"] == pytest.approx(160.0)  # b waits for a: 120 s + slack + a poll
    assert first.severity == "warning"
    assert "mutex group acme.ledger" in first.message and "acme.a, acme.b" in first.message
    assert {t.task_id: t.fires for t in report.tasks} == {"acme.a": 24, "acme.b": 24}


def test_runs_of_a_mutex_group_that_never_meet_are_not_warned(world: MemoryWorld) -> None:
    report = dryrun(world, {"tasks": [hourly("a", 0, mutex_group="m"), hourly("b", 30, mutex_group="m")]})
    assert "mutex" not in kinds(report)


def test_a_jitter_window_makes_a_run_reach_the_next_task_of_its_group(world: MemoryWorld) -> None:
    plain = {"tasks": [hourly("a", 0, 60, mutex_group="m"), hourly("b", 5, 60, mutex_group="m")]}
    assert "mutex" not in kinds(dryrun(world, plain))

    jittered = hourly("a", 0, 60, mutex_group="m")
    jittered["schedule"]["jitter_window"] = "10m"  # Scheduler may deliver a's fire up to 10 min late
    report = dryrun(world, {"tasks": [jittered, hourly("b", 5, 60, mutex_group="m")]})
    mutex = [w for w in report.warnings if w.kind == "mutex"]
    assert mutex and mutex[0].at == START + timedelta(hours=1, minutes=5)
    assert mutex[0].tasks == ("acme.a", "acme.b")


def test_a_wait_past_mutex_max_wait_is_high_and_past_max_wait_says_dead_letter(world: MemoryWorld) -> None:
    group = [hourly(f"t{i}", 0, 250, mutex_group="m") for i in range(4)]  # 3 waits of 260 s
    report = dryrun(world, {"tasks": group}, "2h")
    first = next(w for w in report.warnings if w.kind == "mutex")
    assert first.detail["longest_wait_s"] == pytest.approx(870.0)  # 3 x (250 + 10) + 3 polls
    assert first.severity == "high"  # over the default mutex_max_wait of 10 min
    assert "WAIT_EXHAUSTED" not in first.message  # under the policy's max_wait of 1 h

    short = [hourly(f"t{i}", 0, 250, mutex_group="m", retry_policy={"max_wait": "5m"}) for i in range(4)]
    report = dryrun(world, {"tasks": short}, "2h")
    assert "WAIT_EXHAUSTED" in next(w for w in report.warnings if w.kind == "mutex").message


def test_a_task_longer_than_its_interval_collides_with_itself_as_its_overlap_policy_says(
    world: MemoryWorld,
) -> None:
    slow = {
        "id": "slow",
        "tenant": "acme",
        "schedule": {"cron": "*/4 * * * *"},
        "target": {"type": "sim", "behavior": {"duration_s": 250}},
        "timeout_s": 270,
        "overlap": "skip",
    }
    report = dryrun(world, {"tasks": [slow]}, "1h")
    overlap = [w for w in report.warnings if w.kind == "overlap"]
    assert overlap and overlap[0].tasks == ("acme.slow",)
    assert "skips the later run" in overlap[0].message

    quick = {**slow, "target": {"type": "sim", "behavior": {"duration_s": 60}}}
    assert "overlap" not in kinds(dryrun(world, {"tasks": [quick]}, "1h"))


def test_a_tenant_over_its_quota_is_warned_and_its_headroom_goes_negative(world: MemoryWorld) -> None:
    document = {
        "tasks": [hourly("a"), hourly("b"), hourly("c")],
        "tenants": {"acme": {"max_concurrent_runs": 2}},
    }
    report = dryrun(world, document, "3h")
    quota = next(q for q in report.quotas if q.tenant == "acme")
    assert (quota.cap, quota.peak, quota.min_headroom) == (2, 3, -1)
    assert quota.peak_at == START + timedelta(hours=1)
    assert quota.timeline[0] == (START + timedelta(hours=1), -1)
    warned = [w for w in report.warnings if w.kind == "tenant_quota"]
    assert len(warned) == 3 and warned[0].tasks == ("acme.a", "acme.b", "acme.c")

    roomy = {**document, "tenants": {"acme": {"max_concurrent_runs": 3}}}
    report = dryrun(world, roomy, "3h")
    assert "tenant_quota" not in kinds(report)
    assert next(q for q in report.quotas if q.tenant == "acme").min_headroom == 0


def test_a_deployed_task_the_file_does_not_name_still_collides_with_it(world: MemoryWorld) -> None:
    deployed = task("old", schedule={"cron": "0 * * * *"}, mutex_group="m", timeout_s=200).qualified()
    register(world.deps, deployed)  # as a file registers it: acme.old, in acme's group m
    report = dryrun(world, {"tasks": [hourly("new", mutex_group="m")]}, "2h")
    sources = {t.task_id: t.source for t in report.tasks}
    assert sources == {"acme.new": "file", "acme.old": "deployed"}
    mutex = [w for w in report.warnings if w.kind == "mutex"]
    assert mutex and mutex[0].tasks == ("acme.new", "acme.old")


def test_an_observed_duration_replaces_the_timeout_of_a_deployed_task(world: MemoryWorld) -> None:
    http = {"type": "http", "url": "https://example.com/x"}
    register(
        world.deps, task("seen", schedule={"cron": "0 * * * *"}, mutex_group="m", timeout_s=200, target=http)
    )
    before = dryrun(world, {"tasks": []}, "2h")
    assert [(t.duration_s, t.duration_from) for t in before.tasks] == [(200.0, "timeout")]

    for n, seconds in enumerate((40, 42, 90)):
        fired = START - timedelta(hours=n + 1)
        run_id = scheduled_run_id("seen", fired)
        save_runs(world.deps, scheduled_run("seen", fired, start_s=0, took_s=seconds, run_id=run_id))
    after = dryrun(world, {"tasks": []}, "2h")
    assert [(t.duration_s, t.duration_from) for t in after.tasks] == [(42.0, "observed")]


def test_a_paused_task_that_would_release_many_fires_at_once_is_a_catch_up_storm(world: MemoryWorld) -> None:
    catching = hourly("nightly", catch_up={"policy": "all", "max_runs": 20}, state="paused")
    report = dryrun(world, {"tasks": [catching]}, "12h")
    storm = next(w for w in report.warnings if w.kind == "catch_up_storm")
    assert storm.at == START + timedelta(hours=12)
    assert storm.tasks == ("acme.nightly",)
    assert storm.detail["released"] == 12
    assert storm.severity == "high"  # twice the default threshold of 5

    latest = hourly("nightly", catch_up={"policy": "latest"}, state="paused")
    assert "catch_up_storm" not in kinds(dryrun(world, {"tasks": [latest]}, "12h"))


def test_a_deployed_paused_task_counts_its_fires_since_it_was_paused(world: MemoryWorld) -> None:
    register(world.deps, task("p", schedule={"cron": "0 * * * *"}, catch_up={"policy": "all"}))
    from rebound.ops.tasks import TaskOps

    TaskOps(world.deps, "test").set_state("p", TaskState.PAUSED)
    world.clock.advance(3 * 3600)  # paused 3 h ago
    report = dryrun(world, {"tasks": []}, "3h")
    storm = next(w for w in report.warnings if w.kind == "catch_up_storm")
    assert storm.detail["missed"] == 6 and storm.detail["released"] == 6


def test_workstream_steps_holding_one_resource_are_warned_where_they_overlap(world: MemoryWorld) -> None:
    document = {
        "tasks": [
            {**hourly("load-a"), "schedule": None},
            {**hourly("load-b"), "schedule": None},
        ],
        "workstreams": [
            {
                "id": "wa",
                "tenant": "acme",
                "schedule": {"cron": "0 2 * * *"},
                "steps": [{"task": "load-a", "resources": ["wh"]}],
            },
            {
                "id": "wb",
                "tenant": "acme",
                "schedule": {"cron": "1 2 * * *"},
                "steps": [{"task": "load-b", "resources": ["wh"]}],
            },
        ],
        "resources": [{"id": "wh", "max_holders": 1}],
    }
    report = dryrun(world, document)
    resource = [w for w in report.warnings if w.kind == "resource"]
    assert len(resource) == 1 and resource[0].tasks == ("acme.load-a", "acme.load-b")
    assert resource[0].at == parse_utc("2026-03-08T02:01:00Z")


def test_the_dry_run_changes_nothing(world: MemoryWorld) -> None:
    before = (len(world.store.events), world.store.list_tasks())
    dryrun(world, {"tasks": [hourly("a", mutex_group="m"), hourly("b", mutex_group="m")]})
    assert (len(world.store.events), world.store.list_tasks()) == before


def test_a_bad_window_is_refused_naming_the_option() -> None:
    with pytest.raises(ValidationFailed, match="window: between 1m and 7d"):
        parse_window("30d")
    with pytest.raises(ValidationFailed, match="--window: expected a duration"):
        parse_window("soon", option="--window")


def warning(*runs: str, kind: str = "mutex") -> PreflightWarning:
    return PreflightWarning(kind, START, START, ("t",), runs, "")


def test_the_hit_rate_is_collisions_a_warning_named_over_all_collisions() -> None:
    warnings = [warning("r1", "r2"), warning("r3", "r4"), warning("r9", kind="catch_up_storm")]
    collisions = [
        Collision("r1", "mutex_busy"),
        Collision("r1", "mutex_busy"),  # the same run twice counts once
        Collision("r4", "tenant_quota"),
        Collision("r5", "overlap"),
        Collision("r9", "mutex_busy"),  # a storm warning predicts no collision
    ]
    rate = hit_rate(warnings, collisions)
    assert (rate.collisions, rate.predicted, rate.rate) == (4, 2, 50.0)
    assert (rate.warnings, rate.warnings_that_came_true) == (2, 2)
    assert rate.missed == ("r5", "r9")
    assert hit_rate(warnings, []).rate is None


def test_a_task_file_error_in_the_dry_run_names_the_key(world: MemoryWorld) -> None:
    from rebound.domain.errors import ConfigError

    with pytest.raises(ConfigError, match=r"tasks\[0\]\.mutex_group"):
        PreflightOps(world.deps).parse({"tasks": [hourly("a", mutex_group="Not Valid")]})
    assert isinstance(parse_task_document({"tasks": []}, "x"), TaskDocument)


def test_each_tasks_policy_is_read_once_however_many_collisions_meet_it(
    world: MemoryWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[str] = []
    real = world.deps.policies.for_task_or_default
    monkeypatch.setattr(
        world.deps.policies, "for_task_or_default", lambda task: asked.append(task.id) or real(task)
    )
    every_minute = [{**hourly(f"t{i}"), "schedule": {"cron": "* * * * *"}} for i in range(4)]
    report = dryrun(world, {"tasks": [{**t, "mutex_group": "ledger"} for t in every_minute]}, "2h")
    [mutex] = [w for w in report.warnings if w.kind == "mutex"]
    assert mutex.detail["found_full"] > 4, "many collisions met the same tasks"
    assert sorted(asked) == sorted(set(asked)), "one read per task"
