"""Workstreams and resources in task files and scenario files: one loader, errors that say where."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from rebound.config.loader import load_policy_book, parse_task_document
from rebound.domain.errors import ConfigError
from rebound_local.scenario import parse_scenario

pytestmark = pytest.mark.unit
CONFIG = Path(__file__).resolve().parents[2] / "config"

TASKS = """
tasks:
  - {id: extract, tenant: acme, target: {type: sim}}
  - {id: transform, tenant: acme, target: {type: sim}}
  - {id: load, tenant: acme, target: {type: sim}}
  - {id: report, tenant: acme, target: {type: sim}}
"""

WORKSTREAMS = """
workstreams:
  - id: nightly-ledger
    tenant: acme
    schedule: {cron: "0 2 * * *", timezone: Europe/Berlin}
    steps:
      - {task: extract}
      - {task: transform, needs: [extract]}
      - {task: load, needs: [transform], resources: [warehouse-write]}
      - {task: report, needs: [load], critical: false}
resources:
  - {id: warehouse-write, max_holders: 1}
"""


def parse(text: str) -> Any:
    return parse_task_document(yaml.safe_load(text), "tasks.yaml", load_policy_book(CONFIG / "tasks"))


def refused(text: str) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        parse(text)
    return caught.value


def test_the_documented_workstream_is_accepted() -> None:
    document = parse(TASKS + WORKSTREAMS)
    [ws] = document.workstreams
    assert [s.task for s in ws.steps] == ["extract", "transform", "load", "report"]
    assert ws.step("load").resources == ["warehouse-write"]
    assert ws.step("report").critical is False and ws.step("load").critical is True
    assert ws.schedule is not None and ws.schedule.timezone == "Europe/Berlin"
    assert [(r.id, r.max_holders) for r in document.resources] == [("warehouse-write", 1)]


def test_a_cycle_is_refused_and_its_path_printed() -> None:
    error = refused(TASKS + WORKSTREAMS.replace("- {task: extract}", "- {task: extract, needs: [transform]}"))
    assert error.file == "tasks.yaml"
    assert error.key_path == "workstreams[0].steps"
    assert "extract → transform → extract" in error.problem


def test_an_unknown_task_is_refused_at_its_key_path() -> None:
    error = refused(TASKS + WORKSTREAMS.replace("{task: report,", "{task: reprot,"))
    assert error.key_path == "workstreams[0].steps[3].task"
    assert "unknown task 'reprot'" in error.problem


def test_a_task_registered_before_may_be_a_step() -> None:
    text = TASKS.replace("  - {id: report, tenant: acme, target: {type: sim}}\n", "") + WORKSTREAMS
    refused(text)
    document = parse_task_document(
        yaml.safe_load(text),
        "tasks.yaml",
        load_policy_book(CONFIG / "tasks"),
        known_tasks={"acme.report": "acme"},
    )
    assert len(document.workstreams[0].steps) == 4


def test_an_unknown_resource_is_refused_at_its_key_path() -> None:
    error = refused(TASKS + WORKSTREAMS.replace("resources: [warehouse-write]", "resources: [warehouse]"))
    assert error.key_path == "workstreams[0].steps[2].resources[0]"
    assert "unknown resource 'warehouse'" in error.problem


def test_a_step_listed_twice_is_refused() -> None:
    error = refused(
        TASKS + WORKSTREAMS.replace("- {task: report, needs: [load], critical: false}", "- {task: load}")
    )
    assert error.key_path == "workstreams[0].steps[3].task"
    assert "step 'load' is listed twice (first as steps[2])" in error.problem


def test_a_need_that_is_not_a_step_is_refused() -> None:
    text = TASKS + "  - {id: audit, tenant: acme, target: {type: sim}}\n" + WORKSTREAMS
    error = refused(text.replace("needs: [load]", "needs: [audit]"))
    assert error.key_path == "workstreams[0].steps[3].needs[0]"
    assert "not a step of workstream 'nightly-ledger'" in error.problem


def test_a_task_of_another_tenant_is_refused() -> None:
    error = refused(TASKS.replace("{id: load, tenant: acme", "{id: load, tenant: globex") + WORKSTREAMS)
    assert error.key_path == "workstreams[0].steps[2].task"
    assert "tenant 'globex'" in error.problem


def test_a_qualified_key_of_another_tenant_is_refused_even_beside_a_decoy_of_the_same_short_id() -> None:
    """The steal: globex declares its own ``secret`` and names acme's ``acme.secret`` as a step."""
    text = """
tasks:
  - {id: secret, tenant: globex, target: {type: sim}}
workstreams:
  - {id: steal, tenant: globex, steps: [{task: acme.secret}]}
"""
    error = refused(text)
    assert error.key_path == "workstreams[0].steps[0].task"
    assert "belongs to tenant 'acme'" in error.problem and "'globex'" in error.problem


def test_a_misspelt_key_names_its_path() -> None:
    error = refused(TASKS + WORKSTREAMS.replace("critical: false", "critcal: false"))
    assert error.key_path == "workstreams[0].steps[3].critcal"
    assert "unknown key" in error.problem


def test_a_resource_without_room_is_refused() -> None:
    error = refused(TASKS + WORKSTREAMS.replace("max_holders: 1", "max_holders: 0"))
    assert error.key_path == "resources[0].max_holders"


def test_several_problems_are_all_named() -> None:
    error = refused(
        TASKS + WORKSTREAMS.replace("{task: report,", "{task: nope,").replace("[warehouse-write]", "[nope]")
    )
    assert "unknown resource 'nope'" in error.problem and "unknown task 'nope'" in error.problem


SCENARIO = """
start: "2026-03-07T00:00:00Z"
duration: 1h
"""


def scenario(text: str) -> Any:
    return parse_scenario(yaml.safe_load(text), "scenario.yaml")


def test_a_scenario_accepts_workstreams_as_a_task_file_does() -> None:
    body = TASKS.replace("tasks:", "tasks:", 1)
    loaded = scenario(SCENARIO + body + WORKSTREAMS)
    assert [w.id for w in loaded.workstreams] == ["nightly-ledger"]
    assert [r.id for r in loaded.resources] == ["warehouse-write"]


def test_a_scenario_refuses_a_cycle_with_the_same_error() -> None:
    with pytest.raises(ConfigError) as caught:
        scenario(
            SCENARIO + TASKS + WORKSTREAMS.replace("- {task: extract}", "- {task: extract, needs: [load]}")
        )
    assert caught.value.file == "scenario.yaml"
    assert caught.value.key_path == "workstreams[0].steps"
    assert "extract → load → transform → extract" in caught.value.problem


def test_a_scenario_takes_the_workstreams_of_its_tasks_file(tmp_path: Path) -> None:
    (tmp_path / "tasks.yaml").write_text(TASKS + WORKSTREAMS)
    loaded = parse_scenario(
        yaml.safe_load(SCENARIO + "tasks_file: tasks.yaml\n"), str(tmp_path / "s.yaml"), tmp_path
    )
    assert [w.id for w in loaded.workstreams] == ["nightly-ledger"]


@pytest.mark.parametrize(
    ("operation", "key_path", "problem"),
    [
        (
            "{at: 1m, workstream: nightly, op: start}",
            "operations[0].workstream",
            "unknown workstream 'nightly'",
        ),
        (
            "{at: 1m, workstream: nightly-ledger, op: skip, step: nope}",
            "operations[0].step",
            "has no step 'nope'; its steps: extract, transform, load, report",
        ),
        ("{at: 1m, workstream: nightly-ledger, op: skip}", "operations[0]", "skip needs the step it acts on"),
        (
            "{at: 1m, workstream: nightly-ledger, op: rollback, on_end_of: nope}",
            "operations[0].on_end_of",
            "has no step 'nope'",
        ),
        (
            "{at: 1m, workstream: nightly-ledger, op: resume, token: t1}",
            "operations[0]",
            "token: names the run",
        ),
        (
            "{at: 1m, workstream: nightly-ledger, op: start, on_end_of: extract}",
            "operations[0]",
            "a start has no run yet",
        ),
        ("{at: 1m, workstream: nightly-ledger, op: start, to: 2}", "operations[0]", "to: is the checkpoint"),
        ("{at: 1m, workstream: nightly-ledger, op: explode}", "operations[0].op", "start"),
        (
            "{at: 2h, workstream: nightly-ledger, op: start}",
            "operations[0].at",
            "after the end of the window",
        ),
    ],
)
def test_a_scenarios_operations_name_a_workstream_and_step_it_declares(
    operation: str, key_path: str, problem: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        scenario(SCENARIO + TASKS + WORKSTREAMS + f"operations:\n  - {operation}\n")
    assert caught.value.file == "scenario.yaml"
    assert caught.value.key_path == key_path
    assert problem in caught.value.problem


def test_a_scenarios_operations_are_kept_in_order() -> None:
    loaded = scenario(
        SCENARIO
        + TASKS
        + WORKSTREAMS
        + "operations:\n  - {at: 1m, workstream: nightly-ledger, op: start}\n"
        + "  - {at: 30m, workstream: nightly-ledger, op: rollback, to: 1}\n"
    )
    assert [(o.op, o.to) for o in loaded.scenario.operations] == [("start", None), ("rollback", 1)]
