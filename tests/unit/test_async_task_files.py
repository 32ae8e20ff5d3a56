"""Task files with asynchronous targets: the loader names the file, the key and the problem."""

from __future__ import annotations

from typing import Any

import pytest

from rebound.config.loader import parse_task_file
from rebound.domain.errors import ConfigError

pytestmark = pytest.mark.unit


def task(**fields: Any) -> dict[str, Any]:
    return {
        "id": "nightly-export",
        "tenant": "acme",
        "schedule": {"cron": "0 2 * * *"},
        "target": {"type": "http", "url": "https://export.internal/start", "mode": "async"},
        **fields,
    }


def problem_of(entry: dict[str, Any]) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        parse_task_file({"tasks": [entry]}, "tasks.yaml")
    assert caught.value.file == "tasks.yaml" and caught.value.message.startswith("tasks.yaml: ")
    return caught.value


def test_an_async_task_with_both_limits_loads() -> None:
    [loaded] = parse_task_file({"tasks": [task(heartbeat_timeout="10m", max_duration="3h")]}, "t.yaml")
    assert loaded.is_async and (loaded.heartbeat_timeout, loaded.max_duration) == (600.0, 10800.0)


@pytest.mark.parametrize(
    ("fields", "where", "says"),
    [
        ({"max_duration": "3h"}, "tasks[0]", "needs heartbeat_timeout"),
        ({"heartbeat_timeout": "10m"}, "tasks[0]", "needs max_duration"),
        ({"heartbeat_timeout": "10m", "max_duration": "25h"}, "tasks[0].max_duration", "at most 24h"),
        ({"heartbeat_timeout": "2d", "max_duration": "3h"}, "tasks[0].heartbeat_timeout", "at most 24h"),
        ({"heartbeat_timeout": "4h", "max_duration": "3h"}, "tasks[0]", "must not exceed max_duration"),
    ],
)
def test_missing_or_too_long_limits_are_refused_naming_the_key(
    fields: dict[str, Any], where: str, says: str
) -> None:
    error = problem_of(task(**fields))
    assert error.key_path == where
    assert says in error.message


def test_limits_on_a_synchronous_task_are_refused() -> None:
    entry = task(heartbeat_timeout="10m", max_duration="3h")
    entry["target"] = {"type": "sim"}
    assert "apply to asynchronous targets only" in problem_of(entry).message


def test_a_simulated_async_worker_needs_mode_async() -> None:
    entry = task()
    entry["target"] = {"type": "sim", "behavior": {"async": {"duration": "40m"}}}
    assert "needs target.mode: async" in problem_of(entry).message
