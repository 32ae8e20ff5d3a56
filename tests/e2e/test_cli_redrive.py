"""``rebound dlq redrive`` moves 250 dead letters exactly once, through an interruption, in batches.

The loop itself makes the dead letters: 250 runs of a task whose target fails with a
terminal error. The operator fixes the target, starts the redrive, and it dies right after one
``SendMessageBatch`` was accepted but before its ``DeleteMessageBatch``. Running the same command
again finishes the job. Then every message has left the DLQ once, every run was replayed once
(one audit record each), the executor started each fresh budget once (duplicate replay messages
from the interrupted batch lose their claim), and the SQS requests stayed within 0.35 per message.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from test_cli_harness import Cloud, cloud_fixture

from rebound.domain.run import RunState
from rebound.ops.dlq import REDRIVE_VISIBILITY_S

pytestmark = pytest.mark.e2e
# The runtime's own handlers talk to the stand-in straight into its backends, to make the 250
# dead letters quickly; the CLI still goes over HTTP to AWS_ENDPOINT_URL like any client.
local_cloud = cloud_fixture(transport="direct")
RUNS = 250
CRASH_AFTER_SENDS = 17
MAX_REQUESTS_PER_MESSAGE = 0.35


class InjectedCrash(Exception):
    """The redrive process dies here."""


def bulk_task(behavior: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "bulk",
        "tenant": "acme",
        "event": {"source": ["billing"], "detail-type": ["invoice.due"]},
        "target": {"type": "sim", "behavior": behavior},
    }


def apply(cloud: Cloud, tmp: Path, behavior: dict[str, Any]) -> None:
    (tmp / "bulk.yaml").write_text(yaml.safe_dump({"tasks": [bulk_task(behavior)]}))
    cloud.ok("tasks", "apply", "-f", str(tmp / "bulk.yaml"), "--yes")


def queue_bodies(cloud: Cloud, queue: str) -> list[dict[str, Any]]:
    backend = cloud.stack.cloud.sqs_backend()
    return [json.loads(m.body) for m in backend.get_queue(cloud.stack.settings.queue(queue).name)._messages]


def test_a_redrive_of_hundreds_of_messages_survives_an_interruption_exactly_once(
    local_cloud: Cloud, tmp_path: Path
) -> None:
    # Given 250 dead-lettered runs, each with its DLQ message and work order.
    apply(local_cloud, tmp_path, {"terminal_error": "LEDGER_LOCKED"})
    sqs = boto3.client("sqs")
    url = local_cloud.stack.settings.queue("execution").url
    for start in range(0, RUNS, 10):
        sqs.send_message_batch(
            QueueUrl=url,
            Entries=[
                {
                    "Id": str(i),
                    "MessageBody": json.dumps(
                        {
                            "v": 1,
                            "kind": "manual",
                            "task_id": "acme.bulk",
                            "run_id": f"acme.bulk:m{start + i:04d}",
                            "requested_at": "2026-03-07T09:00:00Z",
                        }
                    ),
                }
                for i in range(10)
            ],
        )
    local_cloud.run_for(timedelta(minutes=3))
    local_cloud.tick(31)
    runs = local_cloud.runs()
    assert len(runs) == RUNS and {r.state for r in runs.values()} == {RunState.DEAD_LETTERED}
    originals = {r.run_id: r.dlq_message_id for r in runs.values()}
    assert len(set(originals.values())) == RUNS and len(queue_bodies(local_cloud, "dlq")) == RUNS
    apply(local_cloud, tmp_path, {"ok": True})  # the operator fixes the target

    # When the redrive dies after its 17th SendMessageBatch, before that batch's delete ...
    sends = Counter[str]()

    def crash_after_send(**_: Any) -> None:
        sends["SendMessageBatch"] += 1
        if sends["SendMessageBatch"] == CRASH_AFTER_SENDS:
            raise InjectedCrash("killed after SendMessageBatch")

    local_cloud.requests.clear()
    local_cloud.hooks.append(("after-call.sqs.SendMessageBatch", crash_after_send))
    try:
        crashed = local_cloud.cli("dlq", "redrive", "--yes")
    finally:
        local_cloud.hooks.clear()
    assert crashed.exit_code == 1
    assert crashed.stderr.strip().splitlines()[-1].startswith("error: unexpected InjectedCrash")
    replayed = [r for r in local_cloud.runs().values() if r.state is RunState.REPLAYED]
    assert len(replayed) == CRASH_AFTER_SENDS * 10
    assert len(queue_bodies(local_cloud, "dlq")) == RUNS - (CRASH_AFTER_SENDS - 1) * 10

    # ... and is run again once the messages it held are visible again,
    local_cloud.tick(REDRIVE_VISIBILITY_S + 1)
    resumed = local_cloud.cli("-o", "json", "dlq", "redrive", "--yes")

    # then every message left the DLQ exactly once:
    assert resumed.exit_code == 0, resumed.output
    report = json.loads(resumed.stdout)
    assert report["outcomes"] == {"moved": RUNS - CRASH_AFTER_SENDS * 10, "resumed": 10}
    assert queue_bodies(local_cloud, "dlq") == []
    assert "redriving" in resumed.stderr  # the progress bar
    # every run was replayed once, with an audit record naming its own DLQ message,
    for run_id, message_id in originals.items():
        replays = [r for r in local_cloud.deps.store.audit_trail(f"run#{run_id}") if r.action == "replayed"]
        assert len(replays) == 1, run_id
        assert replays[0].evidence["dlq_message_id"] == message_id
        assert replays[0].actor == "arn:aws:sts::123456789012:user/moto"
    # the only duplicates are the interrupted batch's resent replay messages,
    replays_queued = Counter(b["run_id"] for b in queue_bodies(local_cloud, "execution"))
    assert set(replays_queued) == set(originals) and sum(replays_queued.values()) == RUNS + 10
    # and the SQS bill stayed within 0.35 requests per message moved, across both runs.
    sqs_requests = sum(n for key, n in local_cloud.requests.items() if key.startswith("sqs:"))
    assert sqs_requests <= MAX_REQUESTS_PER_MESSAGE * RUNS, local_cloud.requests

    # When the executor takes the replays, each fresh budget starts exactly once.
    local_cloud.run_for(timedelta(minutes=2))
    runs = local_cloud.runs()
    assert {r.state for r in runs.values()} == {RunState.SUCCEEDED}
    assert {(r.attempt, r.budget_start) for r in runs.values()} == {(2, 1)}
    calls = Counter(
        (c.run_id, c.attempt) for c in local_cloud.stack.targets.calls if c.task_id == "acme.bulk"
    )
    assert set(calls.values()) == {1} and len(calls) == 2 * RUNS
    assert queue_bodies(local_cloud, "dlq") == []
