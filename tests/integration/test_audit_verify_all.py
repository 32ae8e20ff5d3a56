"""``rebound audit verify --all`` reads the audit table in parallel scan segments and reaches the
same verdicts as verifying each subject on its own: intact chains, a broken chain, a run whose
stored item differs from its trail."""

from __future__ import annotations

import boto3
import pytest

from rebound.engine.deps import Deps
from rebound.ops.audit import AuditOps
from support import START, new_run, task

pytestmark = pytest.mark.integration


def populate(deps: Deps, runs: int) -> None:
    """``runs`` runs, each with its trail, a message's trail of two records, and a task's."""
    for n in range(runs):
        new_run(deps, f"r{n:02d}")
    for _ in range(2):
        uow = deps.store.unit_of_work("executor", START)
        uow.append_audit("msg#m1", action="refused")
        uow.commit()
    deps.store.save_task(task("job"), previous=None, actor="ops", at=START, action="registered")


def test_the_segmented_pass_agrees_with_verifying_each_subject(deps: Deps) -> None:
    populate(deps, 15)
    ops = AuditOps(deps)
    seen = []
    results = ops.verify_all(progress=seen.append, segments=4)
    assert [r.subject for r in results] == ops.subjects() and seen == results
    assert results == [ops.verify(subject) for subject in ops.subjects()]
    assert all(r.ok for r in results)


def test_a_broken_chain_and_a_run_that_differs_from_its_trail_are_reported(
    deps: Deps, aws: boto3.session.Session
) -> None:
    populate(deps, 6)
    table = deps.settings.table("audit")
    client = aws.client("dynamodb")
    client.delete_item(TableName=table, Key={"subject": {"S": "msg#m1"}, "seq": {"N": "1"}})
    runs = aws.client("dynamodb")
    item = runs.get_item(TableName=deps.settings.table("runs"), Key={"run_id": {"S": "r04"}})["Item"]
    item["task_id"] = {"S": "someone-else"}  # written without its audit record
    runs.put_item(TableName=deps.settings.table("runs"), Item=item)

    results = {r.subject: r for r in AuditOps(deps).verify_all(segments=3)}
    assert not results["msg#m1"].ok and not results["run#r04"].ok
    assert "task_id" in results["run#r04"].mismatched
    assert sum(1 for r in results.values() if not r.ok) == 2
