"""Upgrading a deployed stack from the runs index of whole runs (``by_task``) to the keys-only one
(``by_task_keys``), on the local cloud, as docs/deploy.md (*Upgrading*) says to do it on AWS:

1. the stack as an earlier version left it: ``by_task`` with whole runs, runs of every state in it;
2. the first deploy, with ``upgrade.keep_indexes: [runs.by_task]``: the new index is built beside
   the old one (DynamoDB fills it from the items already there), and the functions go on reading
   the old one while it builds;
3. the second deploy, without it: the old index is dropped and the functions read the new one.

No run is lost or changed, a task's runs list the same at every step, and every chain verifies.
"""

from __future__ import annotations

from dataclasses import replace

import boto3
import pytest

from rebound import resources as r
from rebound.domain.run import RunState
from rebound.engine.deps import Deps
from rebound.ops.audit import AuditOps
from rebound.settings import Settings
from rebound.wiring import build_deps
from rebound_local.instrument import RecordingMetrics
from rebound_local.provision import table_args
from support import ManualClock, ended_run, new_run

pytestmark = pytest.mark.integration


def _deps(aws: boto3.session.Session, settings: Settings, clock: ManualClock, reading: str) -> Deps:
    """The functions as a deploy configures them: reading a task's runs from ``reading``."""
    return build_deps(
        settings.model_copy(update={"runs_by_task": reading}),
        session=aws,
        clock=clock,
        metrics=RecordingMetrics(),
    )


def _listed(deps: Deps) -> list[tuple[str, str]]:
    return [(run.run_id, run.state.value) for run in deps.store.runs_for_task("t", newest_first=False)]


def test_a_stack_of_the_earlier_layout_upgrades_in_two_deploys_losing_no_run(
    aws: boto3.session.Session, settings: Settings, clock: ManualClock, deps: Deps
) -> None:
    ddb = aws.client("dynamodb")
    table = settings.table("runs")
    old_by_task, by_state = r.RUNS.retired_indexes[0], r.RUNS.indexes[1]
    earlier = replace(r.RUNS, indexes=(old_by_task, by_state), retired_indexes=())
    ddb.delete_table(TableName=table)
    ddb.create_table(**table_args(earlier, table))

    before = _deps(aws, settings, clock, r.RUNS_BY_TASK_WHOLE)
    new_run(before, "r-pending")
    for state in RunState:
        if state is not RunState.PENDING:
            clock.advance(1)
            ended_run(before, f"r-{state.value}", state)
    runs = {run.run_id: run for run in before.store.scan_runs()}
    listed = _listed(before)
    assert len(listed) == len(RunState) == len(runs)

    # The first deploy: the new index beside the old one; the functions still read the old.
    new_index = r.RUNS.indexes[0]
    ddb.update_table(
        TableName=table,
        AttributeDefinitions=[
            {"AttributeName": k, "AttributeType": "S"} for k in ("task_id", "scheduled_for")
        ],
        GlobalSecondaryIndexUpdates=[
            {
                "Create": {
                    "IndexName": new_index.name,
                    "KeySchema": [
                        {"AttributeName": "task_id", "KeyType": "HASH"},
                        {"AttributeName": "scheduled_for", "KeyType": "RANGE"},
                    ],
                    "Projection": {"ProjectionType": new_index.projection},
                }
            }
        ],
    )
    during = _deps(aws, settings, clock, r.RUNS_BY_TASK_WHOLE)
    assert _listed(during) == listed
    clock.advance(1)
    ended_run(during, "r-during-the-upgrade", RunState.SUCCEEDED)
    listed.append(("r-during-the-upgrade", "succeeded"))
    assert _listed(during) == listed == _listed(_deps(aws, settings, clock, r.RUNS_BY_TASK))

    # The second deploy: the old index dropped; the functions read the new one.
    ddb.update_table(
        TableName=table, GlobalSecondaryIndexUpdates=[{"Delete": {"IndexName": old_by_task.name}}]
    )
    after = _deps(aws, settings, clock, r.RUNS_BY_TASK)
    described = ddb.describe_table(TableName=table)["Table"]["GlobalSecondaryIndexes"]
    assert {i["IndexName"]: i["Projection"]["ProjectionType"] for i in described} == {
        i.name: i.projection for i in r.RUNS.indexes
    }
    assert _listed(after) == listed
    for run_id, run in runs.items():
        assert after.store.get_run(run_id) == run
    results = AuditOps(after).verify_all()
    assert len(results) == len(listed) and all(result.ok for result in results), results
