"""The outbox stream's event source mapping (``rebound_local.streams``): retries, bisecting, the
on-failure record in the control DLQ, and records that stay readable for 24 hours."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from botocore.exceptions import ClientError

from rebound_local import motopatch, observe
from rebound_local.clock import VirtualClock
from rebound_local.stack import Faults, LocalStack
from support import start_virtual

pytestmark = pytest.mark.integration

START = datetime(2026, 3, 7, 9, 0, 10, tzinfo=UTC)


def start(
    started: list[LocalStack], transport: str = "direct", **faults: Any
) -> tuple[LocalStack, VirtualClock]:
    """A stack whose sweeper does nothing: these tests look at the mapping's failure records,
    which the sweeper would otherwise republish and remove (``test_sweeper_recovers_...``)."""
    stack, clock = start_virtual(started, START, transport=transport, faults=Faults(**faults))
    stack.runtime._sweeper = lambda event, context: None
    return stack, clock


def write_events(stack: LocalStack, count: int) -> None:
    ddb = stack.cloud.client("dynamodb")
    for n in range(count):
        ddb.put_item(
            TableName=stack.settings.table("outbox"),
            Item={"event_id": {"S": f"e{n}"}, "detail_type": {"S": "probe"}, "detail": {"S": "{}"}},
        )


def failure_records(stack: LocalStack) -> list[dict[str, Any]]:
    sqs = stack.cloud.client("sqs")
    url = stack.settings.queue("control_dlq").url
    messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
    return [json.loads(m["Body"]) for m in messages]


def sequence(record: dict[str, Any]) -> int:
    return int(record["dynamodb"]["SequenceNumber"])


def test_a_failing_batch_is_bisected_retried_and_recorded_in_the_control_dlq(
    local_stacks: list[LocalStack],
) -> None:
    stack, _ = start(local_stacks, stream_retries=2)
    batches: list[list[int]] = []

    def broken(event: dict[str, Any], context: Any) -> dict[str, Any]:
        batches.append([sequence(r) for r in event["Records"]])
        raise RuntimeError("the bus is down")

    stack.runtime._relay = broken
    write_events(stack, 3)
    stack.runtime.run_virtual(START + timedelta(minutes=3))

    first = batches[0][0]
    s0, s1, s2 = first, first + 1, first + 2
    # Split on each error (no retry spent), then each single record: 1 try + 2 retries.
    assert batches == [[s0, s1, s2], [s0, s1], [s0], [s0], [s0], [s1], [s1], [s1], [s2], [s2], [s2]]
    records = sorted(
        failure_records(stack), key=lambda r: int(r["DDBStreamBatchInfo"]["startSequenceNumber"])
    )
    assert [r["DDBStreamBatchInfo"]["startSequenceNumber"] for r in records] == [str(s0), str(s1), str(s2)]
    record = records[0]
    assert set(record) == {"requestContext", "responseContext", "version", "timestamp", "DDBStreamBatchInfo"}
    assert record["requestContext"]["condition"] == "RetryAttemptsExhausted"
    assert record["requestContext"]["approximateInvokeCount"] == 3
    assert record["requestContext"]["functionArn"].endswith(":function:rebound-local-outbox_relay")
    assert record["responseContext"] == {
        "statusCode": 200,
        "executedVersion": "$LATEST",
        "functionError": "Unhandled",
    }
    assert record["version"] == "1.0"
    info = record["DDBStreamBatchInfo"]
    assert info["endSequenceNumber"] == str(s0) and info["batchSize"] == 1
    assert info["shardId"].startswith("shardId-")
    assert info["streamArn"].startswith(
        f"arn:aws:dynamodb:us-east-1:123456789012:table/{stack.settings.table('outbox')}/stream/"
    )
    assert info["approximateArrivalOfFirstRecord"] == "2026-03-07T09:00:10Z"
    assert stack.runtime.stream.failure_records == 3
    assert observe.pending_stream_records(stack.cloud, stack.settings) == 0  # the mapping moved past them


def test_a_reported_failure_is_retried_from_that_record_and_then_given_up(
    local_stacks: list[LocalStack],
) -> None:
    stack, _ = start(local_stacks, stream_retries=2)
    batches: list[list[int]] = []

    def second_fails(event: dict[str, Any], context: Any) -> dict[str, Any]:
        seqs = [r["dynamodb"]["SequenceNumber"] for r in event["Records"]]
        batches.append([int(s) for s in seqs])
        failed = seqs[1:] if len(batches) == 1 else seqs
        return {"batchItemFailures": [{"itemIdentifier": s} for s in failed[:1]]}

    stack.runtime._relay = second_fails
    write_events(stack, 3)
    stack.runtime.run_virtual(START + timedelta(minutes=3))

    s0 = batches[0][0]
    assert batches == [[s0, s0 + 1, s0 + 2], [s0 + 1, s0 + 2], [s0 + 1, s0 + 2]]
    [record] = failure_records(stack)
    info = record["DDBStreamBatchInfo"]
    assert (info["startSequenceNumber"], info["endSequenceNumber"], info["batchSize"]) == (
        str(s0 + 1),
        str(s0 + 2),
        2,
    )  # the failing suffix only: the first record was delivered
    assert record["requestContext"]["approximateInvokeCount"] == 3
    assert "functionError" not in record["responseContext"]  # the function answered; it raised nothing
    assert stack.runtime.stats.events_relayed == 1


@pytest.mark.parametrize("transport", ["direct", "http"])
def test_a_failed_range_can_be_read_again_from_the_stream_until_it_is_trimmed(
    local_stacks: list[LocalStack], transport: str
) -> None:
    stack, clock = start(local_stacks, transport, stream_retries=0)
    stack.runtime._relay = lambda event, context: {
        "batchItemFailures": [{"itemIdentifier": event["Records"][0]["dynamodb"]["SequenceNumber"]}]
    }
    write_events(stack, 2)
    stack.runtime.run_virtual(START + timedelta(minutes=1))
    [record] = failure_records(stack)
    info = record["DDBStreamBatchInfo"]

    kwargs = {"endpoint_url": stack.cloud.endpoint_url} if transport == "http" else {}
    streams = stack.session.client("dynamodbstreams", **kwargs)

    def read_again() -> list[dict[str, Any]]:
        iterator = streams.get_shard_iterator(
            StreamArn=info["streamArn"],
            ShardId=info["shardId"],
            ShardIteratorType="AT_SEQUENCE_NUMBER",
            SequenceNumber=info["startSequenceNumber"],
        )["ShardIterator"]
        return list(streams.get_records(ShardIterator=iterator, Limit=info["batchSize"])["Records"])

    again = read_again()
    assert [r["dynamodb"]["SequenceNumber"] for r in again] == [
        info["startSequenceNumber"],
        info["endSequenceNumber"],
    ]
    assert [r["dynamodb"]["NewImage"]["event_id"]["S"] for r in again] == ["e0", "e1"]

    clock.advance_to(START + timedelta(hours=24, minutes=2))
    assert stack.runtime.stream.next_batch(clock.now()) is None  # trims what is older than 24 h
    with pytest.raises(ClientError) as caught:
        read_again()
    assert caught.value.response["Error"]["Code"] == "TrimmedDataAccessException"
    assert stack.runtime.stream.expired == 0  # both had been delivered (and given up on) before


def test_without_stream_retries_a_failing_batch_is_retried_until_it_succeeds(
    local_stacks: list[LocalStack],
) -> None:
    stack, _ = start(local_stacks)
    calls: list[int] = []

    def flaky(event: dict[str, Any], context: Any) -> dict[str, Any]:
        calls.append(len(event["Records"]))
        if len(calls) < 4:
            raise RuntimeError("not yet")
        return {"batchItemFailures": []}

    stack.runtime._relay = flaky
    write_events(stack, 3)
    stack.runtime.run_virtual(START + timedelta(seconds=5))
    assert calls == [3, 3, 3, 3]  # the whole batch each time: no bisecting, no giving up
    assert failure_records(stack) == []
    with motopatch.LOCK:
        shard = stack.cloud.dynamodb_backend().get_table(stack.settings.table("outbox")).stream_shard
        assert shard.items == []  # consumed records are dropped at once, as before


def test_the_sweeper_publishes_again_a_stream_batch_the_relay_gave_up_on(
    local_stacks: list[LocalStack],
) -> None:
    """The bus is down long enough for the mapping to give up: the failed attempt's
    ``task.execution.failed`` sits only in the stream. When the bus is back, the sweeper reads
    the range again from the stream, publishes it, and the run is retried and succeeds."""
    from rebound.domain.run import RunState
    from rebound.domain.task import Task

    stack, _ = start_virtual(
        local_stacks, datetime(2026, 3, 7, 8, 59, 30, tzinfo=UTC), faults=Faults(stream_retries=1)
    )
    relay = stack.runtime._relay
    bus_down = [True]

    def flaky_bus(event: dict[str, Any], context: Any) -> Any:
        if bus_down[0]:
            raise RuntimeError("the bus is down")
        return relay(event, context)

    stack.runtime._relay = flaky_bus
    from rebound.ops.tasks import TaskOps

    job = Task.model_validate(
        {
            "id": "job",
            "tenant": "acme",
            "schedule": {"cron": "0 * * * *"},
            "target": {"type": "sim", "behavior": {"fail_first": 1}},
            "retry_policy": {"extends": "default", "base_delay": "30s"},
        }
    )
    ops = TaskOps(stack.deps, actor="test")
    ops.apply(ops.plan([job]))
    stack.runtime.run_virtual(datetime(2026, 3, 7, 9, 0, 20, tzinfo=UTC))
    run = stack.deps.store.get_run("job:20260307T090000Z")
    assert run is not None and run.state is RunState.FAILED
    assert stack.runtime.stream.failure_records >= 1
    bus_down[0] = False
    stack.runtime.run_virtual(datetime(2026, 3, 7, 9, 6, tzinfo=UTC))
    run = stack.deps.store.get_run("job:20260307T090000Z")
    assert run is not None and run.state is RunState.SUCCEEDED and run.attempt == 2
    control = next(d for d in observe.queue_depths(stack.cloud, stack.settings) if d.logical == "control_dlq")
    assert control.total == 0  # the failure record was handled: only the sweeper removes it
