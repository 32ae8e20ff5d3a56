"""Scenario files: what a valid one resolves to, and errors that name the file and the key path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rebound.domain.errors import ConfigError
from rebound_local.scenario import load_faults_file, load_scenario, parse_scenario

pytestmark = pytest.mark.unit

TASK = {
    "id": "nightly",
    "tenant": "acme",
    "schedule": {"cron": "*/5 * * * *"},
    "target": {"type": "sim", "behavior": {"ok": True}},
}


def scenario(**changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = {"start": "2026-03-07T00:00:00Z", "duration": "2h", "tasks": [TASK]}
    data.update(changes)
    return {k: v for k, v in data.items() if v is not None}


def error_of(data: Any) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        parse_scenario(data, "scn.yaml")
    return caught.value


def test_a_valid_scenario_resolves_its_tasks_groups_and_faults() -> None:
    loaded = parse_scenario(
        scenario(
            task_groups=[{**TASK, "id": "job-{n:02d}", "count": 3}],
            faults={
                "duplicate_delivery": 3,
                "crash": {"points": ["after_claim", "after_target", "before_outcome"], "rate": 0.05},
                "throttle": {"dynamodb:PutItem": 0.2, "scheduler:CreateSchedule": 0.5},
            },
        ),
        "scn.yaml",
    )
    assert [t.id for t in loaded.tasks] == ["acme.nightly", "acme.job-01", "acme.job-02", "acme.job-03"]
    assert loaded.scenario.duration == 7200
    assert loaded.scenario.faults.crash is not None and loaded.scenario.faults.crash.rate == 0.05


def test_a_missing_duration_names_the_key() -> None:
    err = error_of(scenario(duration=None))
    assert (err.file, err.key_path) == ("scn.yaml", "duration")
    assert "required" in err.problem


def test_an_unknown_crash_point_names_its_position() -> None:
    err = error_of(scenario(faults={"crash": {"points": ["after_claim", "mid_air"], "rate": 0.1}}))
    assert err.key_path == "faults.crash.points[1]"


def test_a_throttle_share_of_one_or_more_is_refused() -> None:
    err = error_of(scenario(faults={"throttle": {"dynamodb:PutItem": 1.5}}))
    assert err.key_path.startswith("faults.throttle")
    assert "less than 1" in err.problem


def test_a_misspelt_fault_is_an_error_not_a_silent_default() -> None:
    err = error_of(scenario(faults={"duplicate_delivery": 2, "duplicated_delivery": 3}))
    assert err.key_path == "faults.duplicated_delivery"
    assert "unknown key" in err.problem


def test_a_bad_task_inside_a_group_names_the_group() -> None:
    bad = {**TASK, "id": "g-{n}", "count": 2, "schedule": {"cron": "61 * * * *"}}
    err = error_of(scenario(task_groups=[{**TASK, "id": "ok-{n}", "count": 2}, bad]))
    assert err.key_path == "task_groups[1].schedule.cron"


def test_a_group_id_without_n_is_refused() -> None:
    err = error_of(scenario(task_groups=[{**TASK, "count": 2}]))
    assert err.key_path == "task_groups[0].id"


def test_a_bad_inline_task_names_its_index() -> None:
    err = error_of(scenario(tasks=[TASK, {**TASK, "id": "Bad Id"}]))
    assert err.key_path == "tasks[1].id"


def test_tasks_file_and_inline_tasks_together_are_refused() -> None:
    err = error_of(scenario(tasks_file="tasks.yaml"))
    assert "not both" in err.problem


def test_a_missing_tasks_file_names_the_scenario_key(tmp_path: Path) -> None:
    path = tmp_path / "scn.yaml"
    path.write_text('start: "2026-03-07T00:00:00Z"\nduration: 1h\ntasks_file: nowhere.yaml\n')
    with pytest.raises(ConfigError) as caught:
        load_scenario(path)
    assert (caught.value.file, caught.value.key_path) == (str(path), "tasks_file")
    assert "not found" in caught.value.problem


def test_a_tasks_file_is_read_relative_to_the_scenario(tmp_path: Path) -> None:
    (tmp_path / "tasks.yaml").write_text(
        "tasks:\n  - {id: a, tenant: acme, schedule: {rate: '5 minutes'}, target: {type: sim}}\n"
    )
    path = tmp_path / "scn.yaml"
    path.write_text('start: "2026-03-07T00:00:00Z"\nduration: 1h\ntasks_file: tasks.yaml\n')
    assert [t.id for t in load_scenario(path).tasks] == ["acme.a"]


def test_a_duplicate_task_id_across_tasks_and_groups_is_refused() -> None:
    err = error_of(scenario(task_groups=[{**TASK, "id": "nightly", "count": 1}]))
    assert "more than once" in err.problem


def test_not_yaml_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "scn.yaml"
    path.write_text("start: [unclosed\n")
    with pytest.raises(ConfigError) as caught:
        load_scenario(path)
    assert "line" in caught.value.key_path


def test_the_repository_scenarios_are_valid() -> None:
    root = Path(__file__).resolve().parents[2] / "scenarios"
    files = sorted(root.glob("*.yaml"))
    assert files
    for path in files:
        assert load_scenario(path).tasks


def test_a_latency_model_and_expectations_are_read_and_default_to_none() -> None:
    loaded = parse_scenario(
        scenario(
            model={"aws_call_ms": 15, "esm_start_concurrency": 5, "scheduler_invocations_per_s": 1000},
            expect={"on_time_pct": 99},
        ),
        "scn.yaml",
    )
    latency = loaded.scenario.model.latency()
    assert (latency.aws_call_ms, latency.esm_start_concurrency, latency.esm_scale_per_minute) == (15, 5, 300)
    assert latency.active and loaded.scenario.expect.on_time_pct == 99
    plain = parse_scenario(scenario(), "scn.yaml").scenario
    assert not plain.model.latency().active and plain.expect.on_time_pct is None


@pytest.mark.parametrize(
    ("changes", "key_path", "words"),
    [
        ({"model": {"aws_call_ms": -1}}, "model.aws_call_ms", "greater than or equal to 0"),
        (
            {"model": {"esm_start_concurrency": 0}},
            "model.esm_start_concurrency",
            "greater than or equal to 1",
        ),
        ({"model": {"lambda_ms": 3}}, "model.lambda_ms", "unknown key"),
        ({"expect": {"on_time_pct": 120}}, "expect.on_time_pct", "less than or equal to 100"),
    ],
)
def test_a_bad_model_or_expectation_names_its_key(changes: dict[str, Any], key_path: str, words: str) -> None:
    err = error_of(scenario(**changes))
    assert err.file == "scn.yaml" and err.key_path == key_path
    assert words in err.problem


# --------------------------------------------------------------------------- hostile mode
def test_hostile_faults_and_model_keys_are_read() -> None:
    loaded = parse_scenario(
        scenario(
            faults={
                "crash": {"points": ["after_wait", "after_publish"], "rate": 1.0, "limit": 1},
                "transaction_conflict": 0.05,
                "index_lag": "2s",
                "receipt_handles": "latest_only",
                "handler_timeouts": "enforce",
                "stream_retries": 3,
            },
            model={"concurrency": 4, "executor_max_concurrency": 2},
        ),
        "scn.yaml",
    )
    faults, model = loaded.scenario.faults, loaded.scenario.model
    assert faults.crash is not None and faults.crash.limit == 1
    assert faults.crash.points == ["after_wait", "after_publish"]
    assert (faults.transaction_conflict, faults.index_lag) == (0.05, 2.0)
    assert (faults.receipt_handles, faults.handler_timeouts, faults.stream_retries) == (
        "latest_only",
        "enforce",
        3,
    )
    assert (model.concurrency, model.executor_max_concurrency) == (4, 2)
    assert not model.latency().active  # concurrency alone spends no time


def test_hostile_keys_default_to_todays_kind_cloud() -> None:
    faults = parse_scenario(scenario(), "scn.yaml").scenario.faults
    assert faults.transaction_conflict == 0 and faults.index_lag == 0
    assert (faults.receipt_handles, faults.handler_timeouts, faults.stream_retries) == ("recent", "off", None)
    model = parse_scenario(scenario(), "scn.yaml").scenario.model
    assert model.concurrency is None and model.executor_max_concurrency is None


def test_index_lag_takes_milliseconds() -> None:
    loaded = parse_scenario(scenario(faults={"index_lag": "500ms"}), "scn.yaml")
    assert loaded.scenario.faults.index_lag == 0.5


def test_every_declared_crash_point_is_accepted_and_an_unknown_one_lists_them() -> None:
    from rebound.engine.crashpoints import CRASH_POINTS

    every = parse_scenario(scenario(faults={"crash": {"points": list(CRASH_POINTS), "rate": 0.1}}), "s")
    assert every.scenario.faults.crash is not None
    assert every.scenario.faults.crash.points == list(CRASH_POINTS)
    err = error_of(scenario(faults={"crash": {"points": ["after_wait", "after_lunch"], "rate": 0.1}}))
    assert err.key_path == "faults.crash.points[1]"
    assert "after_lunch" in err.problem
    assert all(point in err.problem for point in CRASH_POINTS)


@pytest.mark.parametrize(
    ("changes", "key_path", "words"),
    [
        ({"faults": {"transaction_conflict": 1.0}}, "faults.transaction_conflict", "less than 1"),
        ({"faults": {"index_lag": "soon"}}, "faults.index_lag", "expected a duration"),
        ({"faults": {"index_lag": "2h"}}, "faults.index_lag", "at most 3600 s"),
        ({"faults": {"receipt_handles": "oldest"}}, "faults.receipt_handles", "latest_only"),
        ({"faults": {"handler_timeouts": "yes"}}, "faults.handler_timeouts", "enforce"),
        ({"faults": {"stream_retries": -1}}, "faults.stream_retries", "greater than or equal to 0"),
        (
            {"faults": {"crash": {"points": ["after_wait"], "rate": 1, "limit": 0}}},
            "faults.crash.limit",
            "greater than or equal to 1",
        ),
        ({"model": {"concurrency": 0}}, "model.concurrency", "greater than or equal to 1"),
        (
            {"model": {"executor_max_concurrency": 0}},
            "model.executor_max_concurrency",
            "greater than or equal to 1",
        ),
    ],
)
def test_a_bad_hostile_key_names_its_path(changes: dict[str, Any], key_path: str, words: str) -> None:
    err = error_of(scenario(**changes))
    assert err.file == "scn.yaml" and err.key_path == key_path
    assert words in err.problem


# --------------------------------------------------------------------------- rebound local up --faults
def test_a_faults_file_reads_the_scenario_faults_and_model(tmp_path: Path) -> None:
    path = tmp_path / "faults.yaml"
    path.write_text(
        "seed: 4\n"
        "faults:\n  transaction_conflict: 0.1\n  receipt_handles: latest_only\n"
        "model:\n  concurrency: 2\n"
    )
    chosen = load_faults_file(path)
    assert (chosen.seed, chosen.faults.transaction_conflict, chosen.model.concurrency) == (4, 0.1, 2)
    assert chosen.faults.receipt_handles == "latest_only"


def test_the_repository_faults_file_is_valid() -> None:
    root = Path(__file__).resolve().parents[2]
    assert load_faults_file(root / "config" / "local" / "hostile-faults.yaml").faults.stream_retries == 3


@pytest.mark.parametrize(
    ("text", "key_path", "words"),
    [
        ("faults:\n  index_lag: later\n", "faults.index_lag", "expected a duration"),
        ("faults:\n  crash: {points: [nowhere], rate: 1}\n", "faults.crash.points[0]", "unknown crash point"),
        ("model:\n  concurrency: 2\n", "faults", "required key is missing"),
        ("faults: {}\ntenants: {}\n", "tenants", "unknown key"),
        ("- faults\n", "", "expected a mapping"),
    ],
)
def test_a_bad_faults_file_names_the_file_and_the_key(
    tmp_path: Path, text: str, key_path: str, words: str
) -> None:
    path = tmp_path / "faults.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_faults_file(path)
    assert (caught.value.file, caught.value.key_path) == (str(path), key_path)
    assert words in caught.value.problem


def test_a_message_for_the_bus_must_be_an_event() -> None:
    event = '{"source": "billing", "detail-type": "invoice.created", "detail": {"invoice": "inv-1"}}'
    loaded = parse_scenario(scenario(messages=[{"at": "4m", "queue": "bus", "body": event}]), "scn.yaml")
    assert loaded.scenario.messages[0].queue == "bus"
    error = error_of(scenario(messages=[{"at": "4m", "queue": "bus", "body": '{"source": "billing"}'}]))
    assert "messages[0]" in error.message and "source, detail-type and detail" in error.message
    assert "or bus" in error_of(scenario(messages=[{"at": "4m", "queue": "nowhere", "body": "x"}])).message
