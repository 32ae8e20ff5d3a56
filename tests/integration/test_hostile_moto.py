"""Hostile mode inside moto (``rebound_local.hostile``): what every client of the stand-in meets."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from rebound.settings import Settings
from rebound_local import hostile
from rebound_local.hostile import MotoFaults
from support import ManualClock

pytestmark = pytest.mark.integration

NO_RETRIES = Config(retries={"mode": "standard", "total_max_attempts": 1})


@pytest.fixture
def faults() -> Iterator[list[MotoFaults]]:
    """Activate with ``faults.append(MotoFaults(...)); hostile.activate(...)``; always off afterwards."""
    started: list[MotoFaults] = []
    yield started
    hostile.activate(None)


def on(started: list[MotoFaults], **kwargs: Any) -> MotoFaults:
    faults = MotoFaults(**kwargs)
    started.append(faults)
    hostile.activate(faults)
    return faults


def _put(run_id: str, state: str, **extra: str) -> dict[str, Any]:
    return {"run_id": {"S": run_id}, "state": {"S": state}, "updated_at": {"S": "u"}} | {
        k: {"S": v} for k, v in extra.items()
    }


def _by_state(ddb: Any, table: str, state: str) -> dict[str, dict[str, Any]]:
    items = ddb.query(
        TableName=table,
        IndexName="by_state",
        KeyConditionExpression="#s = :s",
        ExpressionAttributeNames={"#s": "state"},
        ExpressionAttributeValues={":s": {"S": state}},
    )["Items"]
    return {item["run_id"]["S"]: item for item in items}


# --------------------------------------------------------------------------- transaction conflicts
def _transact(ddb: Any, settings: Settings, n: int) -> list[dict[str, Any]]:
    return [
        {"Put": {"TableName": settings.table("runs"), "Item": _put(f"r{n}", "pending")}},
        {"Put": {"TableName": settings.table("outbox"), "Item": {"event_id": {"S": f"e{n}"}}}},
    ]


def _conflicts_seen(aws: boto3.session.Session, settings: Settings) -> list[int]:
    ddb = aws.client("dynamodb", config=NO_RETRIES)
    seen = []
    for n in range(60):
        try:
            ddb.transact_write_items(TransactItems=_transact(ddb, settings, n))
        except ClientError as exc:
            assert exc.response["Error"]["Code"] == "TransactionCanceledException"
            reasons = [r["Code"] for r in exc.response["CancellationReasons"]]  # type: ignore[typeddict-item]
            assert sorted(reasons) == ["None", "TransactionConflict"]
            seen.append(n)
    return seen


def test_a_share_of_transactions_is_cancelled_by_a_conflict_before_anything_is_written(
    aws: boto3.session.Session, settings: Settings, faults: list[MotoFaults]
) -> None:
    injected = on(faults, transaction_conflict=0.3, seed=11)
    seen = _conflicts_seen(aws, settings)

    assert 5 < len(seen) < 40
    assert injected.snapshot()["transaction_conflicts"] == {"dynamodb:TransactWriteItems": len(seen)}
    ddb = aws.client("dynamodb")
    written = {i["run_id"]["S"] for i in ddb.scan(TableName=settings.table("runs"))["Items"]}
    assert written == {f"r{n}" for n in range(60) if n not in seen}
    from moto.dynamodb.models import dynamodb_backends

    shard = dynamodb_backends["123456789012"]["us-east-1"].get_table(settings.table("outbox")).stream_shard
    assert len(shard.items) == 60 - len(seen)  # a cancelled transaction leaves no stream record


def test_the_same_seed_cancels_the_same_transactions(
    aws: boto3.session.Session, settings: Settings, faults: list[MotoFaults]
) -> None:
    on(faults, transaction_conflict=0.3, seed=11)
    first = _conflicts_seen(aws, settings)
    on(faults, transaction_conflict=0.3, seed=11)
    assert _conflicts_seen(aws, settings) == first
    on(faults, transaction_conflict=0.3, seed=12)
    assert _conflicts_seen(aws, settings) != first


def test_only_conditional_single_writes_meet_a_conflict(
    aws: boto3.session.Session, settings: Settings, faults: list[MotoFaults]
) -> None:
    ddb, table = aws.client("dynamodb", config=NO_RETRIES), settings.table("runs")
    injected = on(faults, transaction_conflict=0.999)
    for n in range(5):
        ddb.put_item(TableName=table, Item=_put(f"plain{n}", "ok"))  # no condition: never a conflict
    with pytest.raises(ClientError) as caught:
        ddb.put_item(
            TableName=table, Item=_put("c", "ok"), ConditionExpression="attribute_not_exists(run_id)"
        )
    assert caught.value.response["Error"]["Code"] == "TransactionConflictException"
    with pytest.raises(ClientError) as caught:
        ddb.delete_item(
            TableName=table, Key={"run_id": {"S": "plain0"}}, ConditionExpression="attribute_exists(run_id)"
        )
    assert caught.value.response["Error"]["Code"] == "TransactionConflictException"
    assert "Item" in ddb.get_item(TableName=table, Key={"run_id": {"S": "plain0"}})
    assert "Item" not in ddb.get_item(TableName=table, Key={"run_id": {"S": "c"}})
    assert injected.conflicts == {"dynamodb:PutItem": 1, "dynamodb:DeleteItem": 1}


# --------------------------------------------------------------------------- index lag
def test_an_index_query_sees_the_table_as_it_was_the_lag_ago(
    aws: boto3.session.Session, settings: Settings, clock: ManualClock, faults: list[MotoFaults]
) -> None:
    ddb, table = aws.client("dynamodb"), settings.table("runs")
    ddb.put_item(TableName=table, Item=_put("old", "running", note="before"))
    ddb.put_item(TableName=table, Item=_put("gone", "running"))
    ddb.put_item(TableName=table, Item=_put("moved", "running"))
    injected = on(faults, index_lag_s=2.0)
    clock.advance(10)

    ddb.put_item(TableName=table, Item=_put("new", "running"))
    ddb.update_item(
        TableName=table,
        Key={"run_id": {"S": "old"}},
        UpdateExpression="SET note = :n",
        ExpressionAttributeValues={":n": {"S": "after"}},
    )
    ddb.delete_item(TableName=table, Key={"run_id": {"S": "gone"}})
    ddb.update_item(
        TableName=table,
        Key={"run_id": {"S": "moved"}},
        UpdateExpression="SET #s = :s",
        ExpressionAttributeNames={"#s": "state"},
        ExpressionAttributeValues={":s": {"S": "failed"}},
    )
    clock.advance(1.5)

    running = _by_state(ddb, table, "running")
    assert set(running) == {"old", "gone", "moved"}  # new: not yet; gone and moved: still
    assert running["old"]["note"] == {"S": "before"}
    assert _by_state(ddb, table, "failed") == {}
    # The base table, batch reads and scans are strongly consistent as always.
    assert ddb.get_item(TableName=table, Key={"run_id": {"S": "old"}})["Item"]["note"] == {"S": "after"}
    batch = ddb.batch_get_item(RequestItems={table: {"Keys": [{"run_id": {"S": "new"}}]}})
    assert [i["run_id"]["S"] for i in batch["Responses"][table]] == ["new"]
    assert injected.lagged_queries == 2

    clock.advance(1.0)  # 2.5 s after the writes
    running = _by_state(ddb, table, "running")
    assert set(running) == {"old", "new"}
    assert running["old"]["note"] == {"S": "after"}
    assert set(_by_state(ddb, table, "failed")) == {"moved"}


def test_without_index_lag_an_index_query_sees_every_write_at_once(
    aws: boto3.session.Session, settings: Settings, faults: list[MotoFaults]
) -> None:
    ddb, table = aws.client("dynamodb"), settings.table("runs")
    on(faults, index_lag_s=0.0, transaction_conflict=0.0)
    ddb.put_item(TableName=table, Item=_put("now", "running"))
    assert set(_by_state(ddb, table, "running")) == {"now"}


# --------------------------------------------------------------------------- receipt handles
def _received_twice(
    aws: boto3.session.Session, settings: Settings, clock: ManualClock
) -> tuple[Any, str, str]:
    sqs, url = aws.client("sqs", config=NO_RETRIES), settings.queue("retry").url
    sqs.send_message(QueueUrl=url, MessageBody="m")
    [first] = sqs.receive_message(QueueUrl=url, VisibilityTimeout=1)["Messages"]
    clock.advance(2)
    [second] = sqs.receive_message(QueueUrl=url, VisibilityTimeout=1)["Messages"]
    return sqs, first["ReceiptHandle"], second["ReceiptHandle"]


def _depth(sqs: Any, settings: Settings) -> int:
    attributes = sqs.get_queue_attributes(
        QueueUrl=settings.queue("retry").url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    return int(attributes["ApproximateNumberOfMessages"]) + int(
        attributes["ApproximateNumberOfMessagesNotVisible"]
    )


def test_with_latest_only_an_older_receipt_handle_deletes_nothing(
    aws: boto3.session.Session, settings: Settings, clock: ManualClock, faults: list[MotoFaults]
) -> None:
    injected = on(faults, latest_receipt_only=True)
    sqs, old, new = _received_twice(aws, settings, clock)
    url = settings.queue("retry").url

    sqs.delete_message(QueueUrl=url, ReceiptHandle=old)  # succeeds, as SQS documents ...
    assert _depth(sqs, settings) == 1  # ... and the message stays
    with pytest.raises(ClientError) as caught:
        sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=old, VisibilityTimeout=0)
    assert caught.value.response["Error"]["Code"] == "InvalidParameterValue"
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=new, VisibilityTimeout=5)
    sqs.delete_message(QueueUrl=url, ReceiptHandle=new)
    assert _depth(sqs, settings) == 0
    assert injected.stale_receipts == {"sqs:DeleteMessage": 1, "sqs:ChangeMessageVisibility": 1}


def test_by_default_a_recent_older_handle_still_deletes(
    aws: boto3.session.Session, settings: Settings, clock: ManualClock, faults: list[MotoFaults]
) -> None:
    sqs, old, _ = _received_twice(aws, settings, clock)
    sqs.delete_message(QueueUrl=settings.queue("retry").url, ReceiptHandle=old)
    assert _depth(sqs, settings) == 0


# --------------------------------------------------------------------------- throttling in moto
def test_throttling_in_moto_answers_any_client_before_moto_acts(
    aws: boto3.session.Session, settings: Settings, faults: list[MotoFaults]
) -> None:
    injected = on(faults, throttle={"sqs:SendMessage": 0.999, "dynamodb:PutItem": 0.999})
    sqs, ddb = aws.client("sqs", config=NO_RETRIES), aws.client("dynamodb", config=NO_RETRIES)
    with pytest.raises(ClientError) as caught:
        sqs.send_message(QueueUrl=settings.queue("retry").url, MessageBody="m")
    assert caught.value.response["Error"]["Code"] == "RequestThrottled"
    with pytest.raises(ClientError) as caught:
        ddb.put_item(TableName=settings.table("runs"), Item=_put("t", "ok"))
    assert caught.value.response["Error"]["Code"] == "ProvisionedThroughputExceededException"
    assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert _depth(sqs, settings) == 0
    assert "Item" not in ddb.get_item(TableName=settings.table("runs"), Key={"run_id": {"S": "t"}})
    assert injected.snapshot()["server_throttled"] == {"sqs:SendMessage": 1, "dynamodb:PutItem": 1}
