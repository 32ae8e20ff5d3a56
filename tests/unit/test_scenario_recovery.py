"""A scenario's recoveries of dead-lettered runs (``operations: {replay|redrive|skip|cancel: ...}``):
what they accept, and a ConfigError naming the key for what they do not."""

from __future__ import annotations

import pytest
import yaml

from rebound.domain.errors import ConfigError
from rebound_local.scenario import Operation, Recovery, parse_scenario

pytestmark = pytest.mark.unit

SCENARIO = """
start: "2026-03-07T00:00:00Z"
duration: 2h
task_groups:
  - {count: 3, id: "billing-{n}", tenant: acme, schedule: {cron: "*/10 * * * *"},
     target: {type: sim, behavior: {ok: true}}}
"""


def operations(*entries: str) -> list[Operation | Recovery]:
    text = SCENARIO + "operations:\n" + "".join(f"  - {entry}\n" for entry in entries)
    return list(parse_scenario(yaml.safe_load(text), "scenario.yaml").scenario.operations)


def test_each_recovery_is_read_with_its_act_tasks_and_reason() -> None:
    replay, redrive, skip, cancel = operations(
        "{at: 30m, replay: dead_lettered, task: 'billing-*', reason: failed over}",
        "{at: 40m, redrive: dlq}",
        "{at: 50m, skip: dead_lettered, task: billing-2, reason: retired}",
        "{at: 1h, cancel: dead_lettered, task: billing-3}",
    )
    assert isinstance(replay, Recovery) and replay.op == "replay" and replay.task == "billing-*"
    assert replay.reason == "failed over" and replay.at == 1800
    assert isinstance(redrive, Recovery) and redrive.op == "redrive" and redrive.task == "*"
    assert isinstance(skip, Recovery)
    assert (skip.op, skip.task, skip.reason) == ("skip", "billing-2", "retired")
    assert isinstance(cancel, Recovery) and cancel.op == "cancel" and cancel.reason == "scenario operator"


@pytest.mark.parametrize(
    ("entry", "key_path", "problem"),
    [
        ("{at: 1h, replay: dead_lettered, skip: dead_lettered}", "operations[0]", "exactly one of"),
        ("{at: 1h, replay: everything}", "operations[0].replay", "dead_lettered"),
        ("{at: 1h, redrive: dead_lettered}", "operations[0].redrive", "dlq"),
        ("{at: 1h, replay: dead_lettered, task: 'nightly-*'}", "operations[0].task", "matches none"),
        ("{at: 1h, redrive: dlq, task: 'billing-*'}", "operations[0]", "not the pattern"),
        ("{at: 1h, skip: dead_lettered, reason: '  '}", "operations[0]", "say why"),
        ("{at: 3h, cancel: dead_lettered}", "operations[0].at", "after the end of the window"),
        ("{at: 1h, replay: dead_lettered, when: now}", "operations[0].when", "unknown key"),
        ("{at: 1h}", "operations[0]", "give workstream: (with op:), one of replay:"),
        ("{at: 1h, workstream: w, replay: dead_lettered}", "operations[0]", "give workstream:"),
        ("{at: 1h, replay: dead_lettered, task: 7}", "operations[0].task", "valid string"),
        ("{at: 1h, flag: task-retry, set: 'off'}", "operations[0].flag", "no feature flag 'task-retry'"),
        ("{at: 1h, flag: task-retry-queue, set: false}", "operations[0].set", "'on' or 'off'"),
        ("{at: 1h, flag: task-retry-queue}", "operations[0].set", "missing"),
    ],
)
def test_a_bad_recovery_is_a_config_error_naming_its_key(entry: str, key_path: str, problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        operations(entry)
    assert caught.value.file == "scenario.yaml"
    assert caught.value.key_path == key_path
    assert problem in caught.value.problem


def test_workstream_operations_and_recoveries_mix_in_one_list() -> None:
    text = (
        SCENARIO
        + "workstreams:\n  - {id: nightly, tenant: acme, steps: [{task: billing-1}]}\n"
        + "operations:\n  - {at: 5m, workstream: nightly, op: start}\n"
        + "  - {at: 10m, replay: dead_lettered, task: billing-1}\n"
    )
    first, second = parse_scenario(yaml.safe_load(text), "scenario.yaml").scenario.operations
    assert isinstance(first, Operation) and first.op == "start"
    assert isinstance(second, Recovery) and second.op == "replay"
