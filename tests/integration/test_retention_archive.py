"""Retention with the audit archive, on the local cloud (docs/archive.md).

Runs go through the engine as on AWS; the archiver reads the audit table's stream and archives
each batch to S3; DynamoDB's TTL (``rebound_local.ttl``) then deletes finished runs and runs'
records. Nothing that expires was not archived, every chain still verifies (from the archive and
the table together, from #1), and an expired run still shows, rebuilt from its archived chain.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest

from rebound import resources as r
from rebound.adapters.audit_archive import PREFIX, S3AuditArchive
from rebound.adapters.dynamo.codec import from_item
from rebound.domain.errors import RunNotFound, ValidationFailed
from rebound.domain.ids import scheduled_run_id
from rebound.domain.retention import Retention
from rebound.domain.run import RunState
from rebound.engine.deps import Deps
from rebound.ops.audit import AuditOps
from rebound.ops.retention import migrate_retention
from rebound.ops.runs import RunOps
from rebound.ops.state import StateOps
from rebound_local import ttl
from rebound_local.clock import VirtualClock
from rebound_local.stack import Faults, LocalStack
from support import register, start_virtual, task

pytestmark = pytest.mark.integration

START = datetime(2026, 3, 7, 8, 59, 30, tzinfo=UTC)
SHORT = Retention(runs_days=1, audit_days=2)
FAILING = {"type": "sim", "behavior": {"terminal_error": "LEDGER_LOCKED"}}


def start(started: list[LocalStack], **faults: Any) -> tuple[LocalStack, VirtualClock, Deps]:
    """A stack whose functions keep runs a day and runs' records two; the operators' deps know it."""
    stack, clock = start_virtual(started, START, faults=Faults(**faults))
    stack.deps.store.retention = SHORT
    ops = dataclasses.replace(stack.deps, settings=stack.settings.model_copy(update={"retention": SHORT}))
    return stack, clock, ops


def table_items(stack: LocalStack, logical: str) -> list[dict[str, Any]]:
    ddb = stack.cloud.client("dynamodb")
    pages = ddb.get_paginator("scan").paginate(TableName=stack.settings.table(logical), ConsistentRead=True)
    return [item for page in pages for item in page["Items"]]


def archive(stack: LocalStack) -> S3AuditArchive:
    assert stack.deps.audit_archive is not None
    return S3AuditArchive(lambda: stack.cloud.client("s3"), str(stack.settings.archive_bucket))


def archived_keys(stack: LocalStack) -> set[tuple[str, int]]:
    return {(s, int(f["seq"])) for s, trail in archive(stack).trails().items() for f in trail}


def test_records_are_archived_as_written_expire_by_ttl_and_every_chain_verifies_from_the_archive(
    local_stacks: list[LocalStack],
) -> None:
    stack, clock, ops = start(local_stacks)
    three = {"cron": "0-10/5 9 * * *"}  # 9:00, 9:05, 9:10
    register(
        stack.deps,
        task("acme.ok-every-five-minutes", schedule=three),
        task("acme.fails-every-five", target=FAILING, schedule=three),
    )
    # The archiver's mapping gathers records for up to 5 minutes: the last are archived by 9:30.
    stack.runtime.run_virtual(START + timedelta(minutes=30))

    runs = {from_item(i)["run_id"]: i for i in table_items(stack, "runs")}
    states = {run_id: from_item(i)["state"] for run_id, i in runs.items()}
    assert sorted(states.values()) == ["dead_lettered"] * 3 + ["succeeded"] * 3, states
    # A finished run expires runs_days after it ended; a dead-lettered one never does.
    for run_id, item in runs.items():
        updated = datetime.fromisoformat(from_item(item)["updated_at"].replace("Z", "+00:00"))
        if states[run_id] == "succeeded":
            assert int(item[r.RECORD_TTL]["N"]) == int((updated + timedelta(days=1)).timestamp())
        else:
            assert r.RECORD_TTL not in item
    records = table_items(stack, "audit")
    for item in records:
        subject, at = item["subject"]["S"], from_item(item)["at"]
        written = datetime.fromisoformat(at.replace("Z", "+00:00"))
        if subject.startswith("run#"):
            assert int(item[r.RECORD_TTL]["N"]) == int((written + timedelta(days=2)).timestamp())
        else:  # tasks', work orders', policies' chains stay
            assert r.RECORD_TTL not in item, subject
        assert "ttl" not in from_item(item)  # storage, not part of the record
    # Every record is in the archive once its mapping's window has passed (the sweeper and the
    # work orders go on writing theirs), and nothing is in the archive that is not in the table.
    in_table = {(i["subject"]["S"], int(i["seq"]["N"])) for i in records}
    window = timedelta(seconds=r.SPEC.function("archiver").batch_window_s + 60)
    due = {
        (i["subject"]["S"], int(i["seq"]["N"]))
        for i in records
        if datetime.fromisoformat(from_item(i)["at"].replace("Z", "+00:00")) <= clock.now() - window
    }
    archived = archived_keys(stack)
    assert due <= archived <= in_table
    assert {k for k in in_table if k[0].startswith("run#")} <= archived  # the runs ended at 9:10
    objects = stack.cloud.client("s3").list_objects_v2(Bucket=stack.settings.archive_bucket, Prefix=PREFIX)
    (first, *_) = objects["Contents"]
    body = stack.cloud.client("s3").get_object(Bucket=stack.settings.archive_bucket, Key=first["Key"])
    assert body["Metadata"]["format"] == "rebound-audit-archive/1"
    assert first["Key"].startswith(f"{PREFIX}2026/03/07/") and first["Key"].endswith(".jsonl.gz")

    # Three days on, DynamoDB's TTL has deleted the finished runs and every run's records.
    clock.advance_to(START + timedelta(days=3))
    deleted = ttl.expire(stack.cloud.dynamodb_backend, stack.settings, clock.now())
    assert deleted["runs"] == 3 and deleted["audit"] == sum(1 for s, _ in in_table if s.startswith("run#"))
    left = {from_item(i)["run_id"]: from_item(i)["state"] for i in table_items(stack, "runs")}
    assert sorted(left.values()) == ["dead_lettered"] * 3

    # The table alone: what is left verifies (the chains of tasks and work orders), and state
    # check finds nothing to repair in runs that expired whole or in part.
    report = StateOps(ops).check()
    assert report.differences == [], report.as_dict()
    audit = AuditOps(ops)
    assert all(result.ok for result in audit.verify_all()), [r.as_dict() for r in audit.verify_all()]
    # The archive and the table together: every chain from #1, expired runs by their trails.
    results = {result.subject: result for result in audit.verify_archive()}
    assert {s for s, _ in in_table} == set(results)
    assert all(result.ok for result in results.values()), [r.as_dict() for r in results.values() if not r.ok]
    ended = next(s for s, result in results.items() if "expired from the table" in result.detail)
    assert ended.startswith("run#") and states[ended.removeprefix("run#")] == "succeeded"

    # An expired run still shows: rebuilt from its chain in the archive.
    run_id = scheduled_run_id("acme.ok-every-five-minutes", datetime(2026, 3, 7, 9, 5, tzinfo=UTC))
    with pytest.raises(RunNotFound) as gone:  # the ops API's view: its role does not read the archive
        RunOps(ops, "test").timeline(run_id)
    assert f"`rebound runs show {run_id}` reads it there" in gone.value.message  # where to look
    recent = scheduled_run_id("acme.ok-every-five-minutes", clock.now() - timedelta(hours=1))
    with pytest.raises(RunNotFound) as missing:  # could not have expired yet: no hint
        RunOps(ops, "test").timeline(recent)
    assert missing.value.message == f"no run {recent!r}"
    timeline = RunOps(ops, "test").timeline(run_id, archive=True)
    assert timeline.archived and timeline.run.state is RunState.SUCCEEDED and timeline.chain.ok
    assert [e.action for e in timeline.entries if e.source == "run"][-1] == "attempt-succeeded"
    with pytest.raises(RunNotFound):
        RunOps(ops, "test").timeline("acme.ok-every-five-minutes:20260307T091100Z", archive=True)

    # A finished run deleted by hand before runs_days passed is no expiry: verifying says so.
    clock.advance_to(START + timedelta(days=3, hours=1))
    register(stack.deps, task("acme.late", schedule={"cron": "0 * * * *"}))
    stack.runtime.run_virtual(START + timedelta(days=3, hours=1, minutes=40))
    late = scheduled_run_id("acme.late", datetime(2026, 3, 10, 10, 0, tzinfo=UTC))
    assert stack.deps.store.get_run(late) is not None
    stack.cloud.client("dynamodb").delete_item(
        TableName=stack.settings.table("runs"), Key={"run_id": {"S": late}}
    )
    deleted = audit.verify(late)
    assert not deleted.ok and deleted.detail == "the trail exists but the run does not"

    # An archived record edited in S3 breaks its chain.
    s3 = stack.cloud.client("s3")
    key = first["Key"]
    lines = gzip.decompress(s3.get_object(Bucket=stack.settings.archive_bucket, Key=key)["Body"].read())
    edited = [json.loads(line) for line in lines.splitlines()]
    victim = next(rec for rec in edited if rec["subject"].startswith("run#"))
    victim["actor"] = "someone-else"
    s3.put_object(
        Bucket=stack.settings.archive_bucket,
        Key=key,
        Body=gzip.compress("".join(json.dumps(rec) + "\n" for rec in edited).encode()),
    )
    broken = [result for result in audit.verify_archive() if not result.ok]
    assert [result.subject for result in broken] == sorted([victim["subject"], f"run#{late}"])
    broken = [result for result in broken if result.subject == victim["subject"]]
    assert "altered" in broken[0].detail or "does not verify" in broken[0].detail


def test_a_chain_whose_first_records_expired_verifies_from_the_first_left(
    local_stacks: list[LocalStack],
) -> None:
    """A dead-lettered run skipped a day and a half later: its first records expire before its
    last, and before its item; the table alone verifies what is left, and says so."""
    stack, clock, ops = start(local_stacks)
    register(stack.deps, task("acme.fails-every-five", target=FAILING, schedule={"cron": "0 9 * * *"}))
    stack.runtime.run_virtual(START + timedelta(minutes=10))  # dead-lettered, and archived
    run_id = scheduled_run_id("acme.fails-every-five", datetime(2026, 3, 7, 9, 0, tzinfo=UTC))
    assert stack.deps.store.get_run(run_id).state is RunState.DEAD_LETTERED  # type: ignore[union-attr]
    clock.advance_to(START + timedelta(days=1, hours=12))
    RunOps(ops, "test").skip(run_id, "replaced by a manual export")
    clock.advance_to(START + timedelta(days=2, hours=6))
    ttl.expire(stack.cloud.dynamodb_backend, stack.settings, clock.now())

    live = stack.deps.store.audit_trail(f"run#{run_id}")
    assert live and live[0].seq > 1 and live[-1].to_state == "skipped"
    assert StateOps(ops).check().differences == []  # nothing to rebuild from part of a chain
    result = AuditOps(ops).verify(run_id)
    assert result.ok and f"from #{live[0].seq}" in result.detail, result.detail
    whole = AuditOps(ops).verify(run_id, archive=True)
    assert whole.ok and whole.records == live[-1].seq and "rebuilds from its trail" in whole.detail


def test_a_batch_the_archiver_gave_up_on_is_archived_by_the_sweeper(
    local_stacks: list[LocalStack],
) -> None:
    stack, _, _ = start(local_stacks, stream_retries=1)
    archiver = stack.runtime._archiver
    failing: list[int] = []

    def broken(event: dict[str, Any], context: Any) -> Any:
        failing.append(len(event["Records"]))
        raise RuntimeError("s3 is down")

    sweeper = stack.runtime._sweeper
    stack.runtime._archiver = broken
    stack.runtime._sweeper = lambda event, context: None  # until S3 is back
    register(stack.deps, task("acme.ok-every-five-minutes", schedule={"cron": "0 9 * * *"}))
    stack.runtime.run_virtual(START + timedelta(minutes=8))
    assert failing and not archived_keys(stack)
    assert stack.runtime.archive_stream is not None and stack.runtime.archive_stream.failure_records >= 1

    # S3 is back: the sweeper reads the given-up ranges of the stream again and archives them.
    stack.runtime._archiver, stack.runtime._sweeper = archiver, sweeper
    stack.runtime.run_virtual(START + timedelta(minutes=10))
    in_table = {(i["subject"]["S"], int(i["seq"]["N"])) for i in table_items(stack, "audit")}
    assert in_table <= archived_keys(stack)


def test_records_the_stream_lost_are_archived_by_hand_once(local_stacks: list[LocalStack]) -> None:
    """`rebound audit archive`: what the archive does not hold (here: every object lost) is
    archived again from the table, once; a dry run counts it and writes nothing."""
    stack, _, ops = start(local_stacks)
    register(stack.deps, task("acme.ok-every-five-minutes", schedule={"cron": "0 9 * * *"}))
    stack.runtime.run_virtual(START + timedelta(minutes=10))
    s3, bucket = stack.cloud.client("s3"), str(stack.settings.archive_bucket)
    for item in s3.list_objects_v2(Bucket=bucket)["Contents"]:
        s3.delete_object(Bucket=bucket, Key=item["Key"])
    in_table = {(i["subject"]["S"], int(i["seq"]["N"])) for i in table_items(stack, "audit")}

    audit = AuditOps(ops)
    counted = audit.archive_missing(dry_run=True)
    assert (counted.archived, counted.objects, archived_keys(stack)) == (len(in_table), [], set())
    done = audit.archive_missing()
    assert done.archived == len(in_table) and len(done.objects) == 1
    assert done.objects[0].startswith(f"{PREFIX}2026/03/07/backfill-")
    assert archived_keys(stack) == in_table
    again = audit.archive_missing()
    assert (again.archived, again.already_archived, again.objects) == (0, len(in_table), [])
    assert all(result.ok for result in audit.verify_archive())
    # Only what was written on or after a day: nothing before 2026-03-08 is looked at.
    assert audit.archive_missing(date(2026, 3, 8)).in_table == 0


def test_a_first_record_deleted_before_it_could_expire_breaks_the_chain(
    local_stacks: list[LocalStack],
) -> None:
    """Retention does not make a deleted record look expired: a run's first records may be gone
    only ``audit_days`` after its scheduled time."""
    stack, clock, ops = start(local_stacks)
    register(stack.deps, task("acme.fails-every-five", target=FAILING, schedule={"cron": "0 9 * * *"}))
    stack.runtime.run_virtual(START + timedelta(minutes=10))
    run_id = scheduled_run_id("acme.fails-every-five", datetime(2026, 3, 7, 9, 0, tzinfo=UTC))
    stack.cloud.client("dynamodb").delete_item(
        TableName=stack.settings.table("audit"),
        Key={"subject": {"S": f"run#{run_id}"}, "seq": {"N": "1"}},
    )
    clock.advance_to(START + timedelta(days=1))  # within audit_days (2) of 9:00
    result = AuditOps(ops).verify(run_id)
    assert not result.ok and "record 1 is missing" in result.detail, result.detail
    assert [d.item for d in StateOps(ops).check().differences] == [run_id]


def test_runs_finished_before_retention_get_their_expiry_once(local_stacks: list[LocalStack]) -> None:
    """`rebound migrate retention`: a stack deployed before retention wrote finished runs without
    a ``ttl``; each gets the one it would have had, once, and nothing else of it changes."""
    stack, _, ops = start(local_stacks)
    stack.deps.store.retention = None  # the functions of before
    register(
        stack.deps,
        task("acme.ok-every-five-minutes", schedule={"cron": "0 9 * * *"}),
        task("acme.fails-every-five", target=FAILING, schedule={"cron": "0 9 * * *"}),
    )
    stack.runtime.run_virtual(START + timedelta(minutes=10))
    before = {from_item(i)["run_id"]: i for i in table_items(stack, "runs")}
    assert len(before) == 2 and all(r.RECORD_TTL not in item for item in before.values())

    counted = migrate_retention(ops, dry_run=True)
    assert (counted.examined, counted.matched, counted.changed) == (2, 1, 1)
    assert all(r.RECORD_TTL not in item for item in table_items(stack, "runs"))
    done = migrate_retention(ops)
    assert (done.changed, done.skipped) == (1, 0)
    after = {from_item(i)["run_id"]: i for i in table_items(stack, "runs")}
    ok = scheduled_run_id("acme.ok-every-five-minutes", datetime(2026, 3, 7, 9, 0, tzinfo=UTC))
    ended = datetime.fromisoformat(from_item(after[ok])["updated_at"].replace("Z", "+00:00"))
    assert int(after[ok][r.RECORD_TTL]["N"]) == int((ended + timedelta(days=1)).timestamp())
    assert {k: v for k, v in after[ok].items() if k != r.RECORD_TTL} == before[ok]  # nothing else
    assert r.RECORD_TTL not in after[next(k for k in after if k != ok)]  # dead-lettered: kept
    again = migrate_retention(ops)
    assert (again.changed, again.skipped) == (0, 1)
    with pytest.raises(ValidationFailed, match="no retention"):
        migrate_retention(
            dataclasses.replace(ops, settings=stack.settings.model_copy(update={"retention": None}))
        )


def test_under_the_hostile_cloud_nothing_expires_that_was_not_archived(
    local_stacks: list[LocalStack],
) -> None:
    """Crashes, duplicate delivery, throttles (S3's too), conflicts and index lag, with a stream
    mapping that gives up after one retry: every run's record still reaches the archive (by the
    archiver, or by the sweeper from the failure records), and after TTL every chain verifies."""
    stack, clock, ops = start(
        local_stacks,
        duplicate_delivery=3,
        crash_points=frozenset({"after_claim", "after_target", "before_outcome", "after_publish"}),
        crash_rate=0.05,
        # S3 refuses most batches, so that some always reach the mapping's limit whatever order
        # the threads take (at one in two, a busy machine's order could leave none given up).
        throttle={"dynamodb:PutItem": 0.1, "dynamodb:TransactWriteItems": 0.1, "s3:PutObject": 0.7},
        transaction_conflict=0.05,
        index_lag_s=2.0,
        stream_retries=1,
        seed=11,
    )
    every_hour = {"cron": "*/10 9 * * *"}
    register(
        stack.deps,
        *(task(f"acme.ok-{n}", schedule=every_hour) for n in range(4)),
        task("acme.fails", target=FAILING, schedule=every_hour),
    )
    stack.runtime.run_virtual(START + timedelta(hours=2))  # the last fire at 9:50, then an hour

    records = table_items(stack, "audit")
    runs_records = {
        (i["subject"]["S"], int(i["seq"]["N"])) for i in records if i["subject"]["S"].startswith("run#")
    }
    assert len({s for s, _ in runs_records}) == 30
    assert runs_records <= archived_keys(stack)
    # Not vacuous: S3 refused batches, the mapping gave some up, and the sweeper archived those.
    assert stack.runtime.stats.errors["archiver"] > 0 and stack.runtime.stats.crashes["executor"] > 0
    assert stack.runtime.archive_stream is not None and stack.runtime.archive_stream.failure_records > 0, (
        stack.runtime.archive_stream.failure_records
    )

    clock.advance_to(START + timedelta(days=3))
    ttl.expire(stack.cloud.dynamodb_backend, stack.settings, clock.now())
    assert not [i for i in table_items(stack, "audit") if i["subject"]["S"].startswith("run#")]
    results = AuditOps(ops).verify_archive()
    assert {s for s, _ in runs_records} <= {r.subject for r in results}
    assert all(result.ok for result in results), [r.as_dict() for r in results if not r.ok]
