"""The task file format: the contract the CLI, the demo and the tests share."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rebound.config.loader import load_policy_book, parse_task_file, resolve_policy
from rebound.domain.errors import ConfigError
from rebound.domain.retry_policy import PolicyOverride
from rebound.domain.target_specs import HttpTarget, SimTarget

pytestmark = pytest.mark.unit
CONFIG = Path(__file__).resolve().parents[2] / "config"

ISSUE_EXAMPLE = """
tasks:
  - id: nightly-report            # [a-z0-9_-], at most 48 characters
    tenant: acme
    schedule: {cron: "0 2 * * *", timezone: Europe/Berlin}   # Unix 5-field cron
    target: {type: sim, behavior: {fail_first: 2}}
    payload: {report: daily}
    retry_policy: default         # a name from retry-policies.yaml, or an inline mapping
    timeout_s: 60
"""


def parse(text: str) -> list:  # type: ignore[type-arg]
    return parse_task_file(yaml.safe_load(text), "tasks.yaml", load_policy_book(CONFIG / "tasks"))


def test_the_documented_example_is_accepted() -> None:
    [task] = parse(ISSUE_EXAMPLE)
    assert task.id == "acme.nightly-report"
    assert task.schedule is not None and task.schedule.cron == "0 2 * * *"
    assert task.schedule.timezone == "Europe/Berlin"
    assert isinstance(task.target, SimTarget) and task.target.behavior.fail_first == 2
    assert task.payload == {"report": "daily"}
    assert task.timeout_s == 60


def test_rate_schedules_are_accepted() -> None:
    [task] = parse(
        ISSUE_EXAMPLE.replace('{cron: "0 2 * * *", timezone: Europe/Berlin}', '{rate: "5 minutes"}')
    )
    assert task.schedule is not None and task.schedule.rate == "5 minutes"


@pytest.mark.parametrize(
    "behavior",
    ["{ok: true}", "{fail_first: 3}", "{always_fail: true}", "{terminal_error: BAD_INPUT}"],
)
def test_every_documented_sim_behavior_is_accepted(behavior: str) -> None:
    parse(ISSUE_EXAMPLE.replace("{fail_first: 2}", behavior))


def test_an_inline_policy_overrides_its_named_base() -> None:
    text = ISSUE_EXAMPLE.replace("retry_policy: default ", "retry_policy: {extends: quick, max_attempts: 9}")
    [task] = parse(text)
    assert isinstance(task.retry_policy, PolicyOverride)
    policy = resolve_policy(task, load_policy_book(CONFIG / "tasks"))
    assert policy.max_attempts == 9
    assert policy.base_delay == 10  # from 'quick'


def test_http_target_requires_a_url() -> None:
    [task] = parse(
        ISSUE_EXAMPLE.replace(
            "{type: sim, behavior: {fail_first: 2}}", "{type: http, url: 'https://x.test/run'}"
        )
    )
    assert isinstance(task.target, HttpTarget)


@pytest.mark.parametrize(
    ("replace", "by", "key_path", "problem"),
    [
        ("id: nightly-report", "id: Nightly_Report", "tasks[0].id", "String should match pattern"),
        ("id: nightly-report", "id: " + "x" * 49, "tasks[0].id", "String should match pattern"),
        ('cron: "0 2 * * *"', 'cron: "0 25 * * *"', "tasks[0].schedule.cron", "hour"),
        (
            "timezone: Europe/Berlin",
            "timezone: Mars/Olympus",
            "tasks[0].schedule.timezone",
            "unknown IANA time zone",
        ),
        ("timeout_s: 60", "timeout_s: 0", "tasks[0].timeout_s", "greater than or equal to 1"),
        ("payload: {report: daily}", "paylod: {report: daily}", "tasks[0].paylod", "unknown key"),
        (
            "{fail_first: 2}",
            "{fail_first: 2, always_fail: true}",
            "tasks[0].target.behavior",
            "give one behavior",
        ),
        (
            "retry_policy: default ",
            "retry_policy: nonexistent ",
            "tasks[0].retry_policy",
            "unknown retry policy",
        ),
        ("type: sim", "type: carrier-pigeon", "tasks[0].target", "tag"),
    ],
)
def test_bad_task_files_name_the_file_the_key_and_the_problem(
    replace: str, by: str, key_path: str, problem: str
) -> None:
    with pytest.raises(ConfigError) as err:
        parse(ISSUE_EXAMPLE.replace(replace, by))
    assert err.value.file == "tasks.yaml"
    assert err.value.key_path.startswith(key_path)
    assert problem in err.value.problem
    assert str(err.value).startswith(f"tasks.yaml: {key_path}")


def test_duplicate_task_ids_are_refused() -> None:
    text = ISSUE_EXAMPLE + ISSUE_EXAMPLE.split("tasks:")[1]
    with pytest.raises(ConfigError, match="appears more than once"):
        parse(text)


def test_payload_over_256_kib_is_refused_at_registration() -> None:
    big = "x" * (256 * 1024)
    with pytest.raises(ConfigError, match="256 KiB"):
        parse_task_file(
            {"tasks": [{"id": "a", "tenant": "t", "target": {"type": "sim"}, "payload": {"blob": big}}]},
            "f.yaml",
        )


def test_demo_task_file_is_valid() -> None:
    from rebound.config.loader import load_task_file

    tasks = load_task_file(CONFIG / "demo" / "tasks.yaml", load_policy_book(CONFIG / "tasks"))
    assert [t.id for t in tasks] == ["acme.heartbeat", "acme.sync-invoices", "globex.export-ledger"]
