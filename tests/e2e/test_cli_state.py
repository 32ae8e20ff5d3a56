"""``rebound state check|repair``, ``rebound runs restore`` and ``rebound workorders list --level``
against the local cloud, on a run the real loop dead-lettered (with its work order) under virtual
time. Items are corrupted by writing the tables directly, as a hand edit would."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
import yaml
from test_cli_harness import Cloud, cloud_fixture

from rebound.adapters.dynamo import DynamoStore
from rebound.domain.ids import run_subject

pytestmark = pytest.mark.e2e
local_cloud_base = cloud_fixture(name="local_cloud_base")
OPERATOR = "arn:aws:sts::123456789012:user/moto"
RUN = "globex.export-ledger:20260307T090500Z"


@pytest.fixture(scope="module")
def local_cloud(local_cloud_base: Cloud, tmp_path_factory: pytest.TempPathFactory) -> Cloud:
    task = {
        "id": "export-ledger",
        "tenant": "globex",
        "schedule": {"cron": "5 9 * * *"},
        "target": {"type": "sim", "behavior": {"terminal_error": "BAD_INPUT"}},
    }
    file = tmp_path_factory.mktemp("state") / "tasks.yaml"
    file.write_text(yaml.safe_dump({"tasks": [task]}))
    local_cloud_base.ok("tasks", "apply", "-f", str(file))
    local_cloud_base.run_for(timedelta(minutes=8))
    assert local_cloud_base.runs()[RUN].state.value == "dead_lettered"
    return local_cloud_base


def set_state(cloud: Cloud, table: str, key: dict[str, str], value: str) -> None:
    store = cloud.deps.store
    assert isinstance(store, DynamoStore)
    store.client.update_item(
        TableName=store.tables[table],
        Key={k: {"S": v} for k, v in key.items()},
        UpdateExpression="SET #s = :v",
        ExpressionAttributeNames={"#s": "state"},
        ExpressionAttributeValues={":v": {"S": value}},
    )


def test_check_finds_a_hand_edit_repair_writes_it_back_and_check_is_clean(local_cloud: Cloud) -> None:
    assert local_cloud.ok("state", "check").exit_code == 0
    set_state(local_cloud, "runs", {"run_id": RUN}, "succeeded")

    found = local_cloud.cli("-o", "json", "state", "check")
    assert found.exit_code == 3
    assert [d["field"] for d in json.loads(found.stdout)["differences"]] == ["state"]
    table = local_cloud.cli("state", "check")
    assert RUN in table.stdout and "succeeded" in table.stdout and "dead_lettered" in table.stdout

    dry = local_cloud.ok("state", "repair", "--dry-run")
    assert "dry run: nothing was written" in dry.stdout
    assert local_cloud.runs()[RUN].state.value == "succeeded"

    local_cloud.ok("state", "repair", "--reason", "INC-7: edited by hand", "--yes")
    assert local_cloud.runs()[RUN].state.value == "dead_lettered"
    assert local_cloud.ok("state", "check").exit_code == 0
    last = local_cloud.deps.store.audit_trail(run_subject(RUN))[-1]
    assert (last.action, last.actor) == ("state-repaired", OPERATOR)


def test_runs_restore_recreates_a_deleted_run(local_cloud: Cloud) -> None:
    store = local_cloud.deps.store
    assert isinstance(store, DynamoStore)
    before = local_cloud.runs()[RUN]
    store.client.delete_item(TableName=store.tables["runs"], Key={"run_id": {"S": RUN}})
    local_cloud.ok("runs", "restore", RUN, "--reason", "deleted by a script", "--yes")
    after = local_cloud.runs()[RUN]
    assert after.state is before.state and after.attempts == before.attempts
    assert local_cloud.cli("runs", "restore", "nope:1", "--yes").exit_code == 4


def test_workorders_list_filters_by_level(local_cloud: Cloud) -> None:
    [order] = local_cloud.json("workorders", "list", "--level", "2")
    assert order["run_id"] == RUN and order["level"] == 2
    assert local_cloud.json("workorders", "list", "--level", "4") == []
    refused = local_cloud.cli("workorders", "list", "--level", "5")
    assert refused.exit_code == 2 and "--level" in refused.output
