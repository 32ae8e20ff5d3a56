"""The ops API's state routes on the DynamoDB store (moto): ``POST /state/check``,
``POST /state/repair`` (with ``dry_run``) and ``POST /runs/{run_id}/restore``; the work-order
list's ``level`` filter. Items are corrupted by writing the tables directly, as a hand edit would."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from test_ops_api import ALICE, call

from rebound import wiring
from rebound.adapters.dynamo import DynamoStore
from rebound.domain.basics import Severity
from rebound.domain.ids import run_subject
from rebound.domain.run import RunState
from rebound.engine.deps import Deps
from rebound.ops.state import ACTION
from rebound.ops.workorders import WorkOrderOps
from support import ended_run

pytestmark = pytest.mark.integration
RUN = "t:manual-1"


@pytest.fixture
def api(deps: Deps) -> Iterator[Any]:
    from rebound.handlers import ops_api

    ended_run(deps, RUN, RunState.FAILED)
    wiring.use(deps)
    yield ops_api
    wiring.use(None)


def dynamo(deps: Deps) -> DynamoStore:
    assert isinstance(deps.store, DynamoStore)
    return deps.store


def set_attribute(deps: Deps, table: str, key: dict[str, str], name: str, value: str) -> None:
    store = dynamo(deps)
    store.client.update_item(
        TableName=store.tables[table],
        Key={k: {"S": v} for k, v in key.items()},
        UpdateExpression="SET #n = :v",
        ExpressionAttributeNames={"#n": name},
        ExpressionAttributeValues={":v": {"S": value}},
    )


def test_check_repair_and_check_again_over_http(api: Any, deps: Deps) -> None:
    order = WorkOrderOps(deps, "test").create(severity=Severity.HIGH, reason="disk full", run_id=None)
    status, clean = call(api, "POST", "/state/check")
    assert status == 200 and clean["differences"] == [] and clean["next"] is None
    assert clean["examined"]["runs"] == 1 and clean["examined"]["workorders"] == 1

    set_attribute(deps, "runs", {"run_id": RUN}, "state", "succeeded")
    set_attribute(deps, "workorders", {"work_order_id": order.work_order_id}, "state", "resolved")
    status, found = call(api, "POST", "/state/check", {})
    differences = {(d["kind"], d["field"]): (d["stored"], d["chain"]) for d in found["differences"]}
    assert differences == {
        ("run", "state"): ("succeeded", "failed"),
        ("workorder", "state"): ("resolved", "open"),
    }

    status, dry = call(api, "POST", "/state/repair", {"dry_run": True})
    assert status == 200 and dry["dry_run"] and dry["repaired"] == [] and len(dry["differences"]) == 2
    assert call(api, "POST", "/state/check")[1]["differences"] == found["differences"], (
        "a dry run wrote nothing"
    )

    status, repaired = call(api, "POST", "/state/repair", {"reason": "INC-1: hand edit"})
    assert status == 200 and repaired["failed"] == []
    assert sorted(repaired["repaired"]) == [f"run {RUN}", f"workorder {order.work_order_id}"]
    assert call(api, "POST", "/state/check")[1]["differences"] == []
    last = deps.store.audit_trail(run_subject(RUN))[-1]
    assert (last.action, last.actor, last.evidence["reason"]) == (ACTION, ALICE, "INC-1: hand edit")

    status, refused = call(api, "POST", "/state/check", {"after": "nowhere"})
    assert status == 400 and refused["key_path"] == "after"


def test_restore_recreates_a_deleted_run_from_its_chain(api: Any, deps: Deps) -> None:
    store = dynamo(deps)
    store.client.delete_item(TableName=store.tables["runs"], Key={"run_id": {"S": RUN}})
    status, dry = call(api, "POST", f"/runs/{RUN}/restore", {"dry_run": True})
    assert status == 200 and dry["differences"][0]["field"] == "state" and deps.store.get_run(RUN) is None
    status, restored = call(api, "POST", f"/runs/{RUN}/restore", {"reason": "deleted by a script"})
    assert status == 200 and restored["repaired"] == [f"run {RUN}"]
    run = deps.store.get_run(RUN)
    assert run is not None and run.state is RunState.FAILED and [a.n for a in run.attempts] == [1]
    assert call(api, "POST", "/runs/nope:1/restore")[0] == 404


def test_the_work_order_list_filters_by_escalation_level(api: Any, deps: Deps) -> None:
    high = WorkOrderOps(deps, "test").create(severity=Severity.HIGH, reason="disk full", run_id=None)
    critical = WorkOrderOps(deps, "test").create(severity=Severity.CRITICAL, reason="ledger", run_id=RUN)
    status, level3 = call(api, "GET", "/workorders", query={"level": "3"})
    assert status == 200 and [o["work_order_id"] for o in level3] == [critical.work_order_id]
    assert [o["level"] for o in call(api, "GET", "/workorders", query={"level": "2"})[1]] == [2]
    assert high.level == 2
    assert call(api, "GET", "/workorders", query={"level": "5"})[0] == 400
