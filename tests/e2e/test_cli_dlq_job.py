"""``rebound dlq job JOB_ID [--follow]`` shows a redrive job started from the console or the API,
follows it with a progress bar until it is done, and carries on a job whose continuation was
lost; ``rebound dlq history`` shows the DLQ's depth over time from its record."""

from __future__ import annotations

from typing import Any

import pytest
from test_cli_harness import Cloud, cloud_fixture

from rebound.domain.run import RunState
from rebound.ops.dlq import DlqFilter, DlqOps
from rebound.ops.dlq.jobs import STALE_S, RedriveJobs, continue_job
from support import dead_letters

pytestmark = pytest.mark.e2e
local_cloud = cloud_fixture()
CONSOLE_OPERATOR = "arn:aws:sts::123456789012:assumed-role/oncall/carol"
CHUNK = 10


def start_job(cloud: Cloud, task_id: str) -> str:
    """A redrive job of ``task_id``'s dead letters, started as the console does; its continuation
    (the ops API function invoking itself) is the test's to play."""
    ops = DlqOps(cloud.deps, CONSOLE_OPERATOR, wait_s=0)
    return RedriveJobs(ops, lambda _job_id: None).start(DlqFilter(task_id=task_id)).job_id


class ChunkPerPoll(list[float]):
    """The CLI's sleeps between polls; during each, the ops API function runs one chunk of the job."""

    def __init__(self, cloud: Cloud, job_id: str) -> None:
        super().__init__()
        self.cloud, self.job_id = cloud, job_id

    def append(self, seconds: float) -> None:
        super().append(seconds)
        continue_job(self.cloud.deps, self.job_id, lambda _job_id: None, chunk_messages=CHUNK)


def test_a_job_is_shown_then_followed_to_the_end_with_a_progress_bar(
    local_cloud: Cloud, monkeypatch: Any
) -> None:
    run_ids = dead_letters(local_cloud.deps, 25, "ledger")
    job_id = start_job(local_cloud, "ledger")

    shown = local_cloud.json("dlq", "job", job_id)
    assert (shown["state"], shown["total"], shown["moved"], shown["remaining"]) == ("running", 25, 0, 25)
    assert shown["created_by"] == CONSOLE_OPERATOR and shown["done"] is False
    assert f"job {job_id} running: 0 moved" in local_cloud.ok("dlq", "job", job_id).stdout

    polls = ChunkPerPoll(local_cloud, job_id)
    monkeypatch.setattr(local_cloud, "sleeps", polls)
    followed = local_cloud.ok("dlq", "job", job_id, "--follow", "--interval", "2")
    assert f"redrive job {job_id}" in followed.stderr  # the progress bar, on stderr
    assert "25/25" in followed.stderr
    assert f"job {job_id} succeeded: 25 moved" in followed.stdout and "0 remaining of 25" in followed.stdout
    # three chunks (each ends after the batch that reaches 10 messages), one per poll
    assert polls == [2.0, 2.0, 2.0]
    done = local_cloud.json("dlq", "job", job_id)
    assert (done["state"], done["moved"], done["chunks"], done["progress"]) == ("succeeded", 25, 3, 1.0)
    assert {local_cloud.deps.store.get_run(r).state for r in run_ids} == {RunState.REPLAYED}  # type: ignore[union-attr]


def test_follow_carries_on_a_job_whose_continuation_was_lost(local_cloud: Cloud) -> None:
    run_ids = dead_letters(local_cloud.deps, 3, "billing")
    job_id = start_job(local_cloud, "billing")
    local_cloud.tick(STALE_S + 30)  # nothing continued it

    quiet = local_cloud.ok("dlq", "job", job_id)
    assert "--follow carries it on" in quiet.stderr and "running" in quiet.stdout

    followed = local_cloud.ok("-o", "json", "dlq", "job", job_id, "--follow")
    assert "went quiet: carrying it on from here" in followed.stderr
    assert '"state": "succeeded"' in followed.stdout
    trail = local_cloud.deps.store.audit_trail(f"redrive-job#{job_id}")
    assert [(r.action, r.actor) for r in trail] == [
        ("dlq-redrive-job-started", CONSOLE_OPERATOR),
        ("dlq-redrive-job-finished", CONSOLE_OPERATOR),  # the operator who started it, whoever carried it on
    ]
    assert {local_cloud.deps.store.get_run(r).state for r in run_ids} == {RunState.REPLAYED}  # type: ignore[union-attr]


def test_an_unknown_job_is_one_line_and_exit_4(local_cloud: Cloud) -> None:
    result = local_cloud.cli("dlq", "job", "nope")
    assert result.exit_code == 4
    assert "no redrive job nope" in result.stderr and result.stdout == ""


def test_history_shows_the_depth_over_time_from_the_record(local_cloud: Cloud) -> None:
    dead_letters(local_cloud.deps, 2, "report")
    history = local_cloud.json("dlq", "history", "--window", "24h")
    assert (history["window"], history["bucket_s"], len(history["points"])) == ("24h", 900, 96)
    in_dlq = local_cloud.deps.queues.counts("dlq").total
    assert history["points"][-1]["depth"] == in_dlq >= 2 and history["complete"] is True
    table = local_cloud.ok("-o", "table", "dlq", "history").stdout
    assert "DLQ depth, last 1h" in table and "arrived" in table
    bad = local_cloud.cli("dlq", "history", "--window", "7d")
    assert bad.exit_code == 2 and "'7d' is not one of '1h', '24h'" in bad.stderr
