"""The ``direct`` transport answers like the wire does (see ``rebound_local.direct``).

Every script below runs twice, each time on a freshly started local cloud (``start_local``): once
with the clients the handlers get on the ``inproc`` transport (botocore validates and serializes
each request and parses each response, against in-process moto) and once with the clients they
get on the ``direct`` transport (the ``Direct*`` clients, calling moto's backends). The two
transcripts of answers, normalized only where the wire legitimately differs, must be equal.

Starting a local cloud takes about a second, so the scripts share one cloud per transport: they
run in the same order on both, each on its own tables, queues or schedules. Both clouds start at
the same virtual instant and the ``VirtualClock`` only moves when a script moves it, so every
timestamp moto hands out (SentTimestamp, CreationDate, ...) is the same on both runs and is
compared as is.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from botocore.client import BaseClient
from botocore.exceptions import ClientError

from rebound import resources as r
from rebound_local import hostile
from rebound_local.clock import VirtualClock
from rebound_local.cloud import reset_moto
from rebound_local.direct import DirectDynamoDB, DirectEvents, DirectScheduler, DirectSQS
from rebound_local.hostile import MotoFaults
from rebound_local.stack import LocalStack, start_local
from support import START

pytestmark = pytest.mark.integration

TRANSPORTS = ("inproc", "direct")
DIRECT_CLASSES = {
    "dynamodb": DirectDynamoDB,
    "sqs": DirectSQS,
    "events": DirectEvents,
    "scheduler": DirectScheduler,
}

# Values moto draws at random on every run: a message id (uuid4), a receipt handle (random
# letters), an event id (uuid4). They cannot be equal across two runs, so each is replaced by
# its kind and the order in which the script first saw it: "the message received second is the
# one sent first" still has to hold on both transports.
RANDOM_IDS = frozenset({"MessageId", "ReceiptHandle", "EventId"})

# Keys dropped before comparing:
# - ResponseMetadata: request id, HTTP headers and retry count of the HTTP exchange; the direct
#   transport has no exchange, and nothing in the app reads it.
# - MD5OfMessageAttributes: botocore checks it against the attributes on the wire and nothing
#   reads it afterwards; the direct transport deliberately leaves it out (``direct._received``).
#   MD5OfBody / MD5OfMessageBody are kept and compared.
DROPPED = frozenset({"ResponseMetadata", "MD5OfMessageAttributes"})
# Dropped only when empty: moto's TransactWriteItems answer on the wire always carries an empty
# ConsumedCapacity list and ItemCollectionMetrics map (DynamoDB returns them only when
# ReturnConsumedCapacity / ReturnItemCollectionMetrics ask for them). Empty, they say nothing.
DROPPED_IF_EMPTY = frozenset({"ConsumedCapacity", "ItemCollectionMetrics"})


@dataclass
class Step:
    label: str
    answer: Any
    wire: bool
    """Whether botocore sent a request for this call (seen by a ``before-send`` hook)."""


@dataclass
class Transcript:
    """One script's run on one transport: the normalized answer to every call it made."""

    script: str
    transport: str
    stack: LocalStack
    clock: VirtualClock
    sent: list[str]
    """``service:Operation`` of every request botocore sent on this transport's clients."""
    began: datetime = START
    steps: list[Step] = field(default_factory=list)
    _aliases: dict[tuple[str, str], str] = field(default_factory=dict)

    @property
    def ddb(self) -> Any:
        return self.stack.deps.store.client

    @property
    def sqs(self) -> Any:
        return self.stack.deps.queues.client

    @property
    def events(self) -> Any:
        return self.stack.deps.bus.client

    @property
    def scheduler(self) -> Any:
        return self.stack.deps.schedules.client

    def advance(self, seconds: float) -> None:
        self.clock.advance_to(self.clock.now() + timedelta(seconds=seconds))

    def call(
        self,
        label: str,
        operation: Callable[..., Any],
        *,
        shape: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
        **params: Any,
    ) -> dict[str, Any]:
        """Call; record the normalized answer (or error, ``shape``d first); return the raw answer."""
        before = len(self.sent)
        try:
            raw = dict(operation(**params))
        except ClientError as exc:
            self.record(label, self._error(exc), wire=len(self.sent) > before)
            return dict(exc.response)
        except Exception as exc:  # not what botocore raises: recorded, so that it shows as a difference
            raised = f"{type(exc).__module__}.{type(exc).__qualname__}"
            self.record(label, {"error": True, "not a ClientError": raised}, wire=len(self.sent) > before)
            return {}
        self.record(label, self.normalize(shape(raw) if shape else raw), wire=len(self.sent) > before)
        return raw

    def record(self, label: str, answer: Any, *, wire: bool = False) -> None:
        assert label not in {s.label for s in self.steps}, f"{self.script}: two steps named {label!r}"
        self.steps.append(Step(label, answer, wire))

    def answer(self, label: str) -> Any:
        [step] = [s for s in self.steps if s.label == label]
        return step.answer

    def alias(self, kind: str, value: str) -> str:
        key = (kind, value)
        if key not in self._aliases:
            count = sum(1 for k, _ in self._aliases if k == kind)
            self._aliases[key] = f"<{kind} #{count + 1}>"
        return self._aliases[key]

    def normalize(self, value: Any) -> Any:
        if isinstance(value, dict):
            return {
                k: self.alias(k, v) if k in RANDOM_IDS and isinstance(v, str) else self.normalize(v)
                for k, v in value.items()
                if k not in DROPPED and not (k in DROPPED_IF_EMPTY and not v)
            }
        if isinstance(value, list | tuple):
            return [self.normalize(v) for v in value]
        if isinstance(value, datetime):
            # The same virtual instant on both runs, so the value is compared; a naive datetime
            # is a different answer (the app compares these with aware ones), so it shows as one.
            return value.astimezone(UTC) if value.tzinfo is not None else f"naive {value.isoformat()}"
        return value

    def _error(self, exc: ClientError) -> dict[str, Any]:
        response: dict[str, Any] = dict(exc.response)
        error = response.get("Error", {})
        # Any ClientError: which subclass botocore picked from the service model is left out here
        # (the direct clients raise plain ClientError, and the app reads only the code); code,
        # message and status are compared.
        shaped: dict[str, Any] = {
            "error": True,
            "operation": exc.operation_name,
            "Code": error.get("Code"),
            "Message": error.get("Message"),
            "HTTPStatusCode": response.get("ResponseMetadata", {}).get("HTTPStatusCode"),
        }
        for key in ("CancellationReasons", "Item"):
            if key in response:
                shaped[key] = self.normalize(response[key])
        return shaped


Script = Callable[[Transcript], None]
SCRIPTS: dict[str, Script] = {}


def script(fn: Script) -> Script:
    """Register a script; all run in definition order on each transport."""
    SCRIPTS[fn.__name__] = fn
    return fn


def error_code(answer: Any) -> Any:
    return answer.get("Code") if isinstance(answer, dict) and answer.get("error") else None


# ------------------------------------------------------------------------------- running the two
def _check_transport(stack: LocalStack, transport: str) -> None:
    """The run really uses the transport it is named after."""
    clients = {
        "dynamodb": stack.deps.store.client,
        "sqs": stack.deps.queues.client,
        "events": stack.deps.bus.client,
        "scheduler": stack.deps.schedules.client,
    }
    for service, client in clients.items():
        if transport == "direct":
            assert isinstance(client, DIRECT_CLASSES[service]), service
        else:
            assert not isinstance(client, tuple(DIRECT_CLASSES.values())), service
            assert isinstance(client, BaseClient), service
            # No endpoint override: moto's in-process stubber answers the regular AWS endpoint.
            assert "amazonaws.com" in client.meta.endpoint_url, client.meta.endpoint_url


def _hook_sends(stack: LocalStack, sent: list[str]) -> None:
    """Note each request botocore sends. A ``Direct*`` client shares its fallback's ``meta``."""

    def on_send(event_name: str, **_: Any) -> None:
        _, service, operation = event_name.split(".", 2)
        sent.append(f"{service}:{operation}")

    for client in (
        stack.deps.store.client,
        stack.deps.queues.client,
        stack.deps.bus.client,
        stack.deps.schedules.client,
    ):
        client.meta.events.register("before-send", on_send)


@dataclass
class Runs:
    transcripts: dict[tuple[str, str], Transcript]
    crashed: dict[tuple[str, str], BaseException]

    def pair(self, name: str) -> tuple[Transcript, Transcript]:
        for transport in TRANSPORTS:
            if (name, transport) in self.crashed:
                raise AssertionError(f"{name} crashed on {transport}") from self.crashed[name, transport]
        return self.transcripts[name, "inproc"], self.transcripts[name, "direct"]


@pytest.fixture(scope="module")
def runs() -> Iterator[Runs]:
    result = Runs({}, {})
    for transport in TRANSPORTS:
        reset_moto()  # moto is process-global: each transport starts from nothing
        clock = VirtualClock(START)
        stack = start_local(clock, transport=transport)
        try:
            _check_transport(stack, transport)
            sent: list[str] = []
            _hook_sends(stack, sent)
            for name, fn in SCRIPTS.items():
                transcript = Transcript(name, transport, stack, clock, sent, began=clock.now())
                result.transcripts[name, transport] = transcript
                try:
                    fn(transcript)
                except Exception as exc:  # reported by the test that reads this script
                    result.crashed[name, transport] = exc
        finally:
            stack.stop()
    reset_moto()
    yield result


def assert_same_answers(
    inproc: Transcript, direct: Transcript, *, direct_over_wire: frozenset[str] = frozenset()
) -> None:
    """Both transports got the same answers; on ``direct`` only ``direct_over_wire`` took botocore."""
    assert inproc.transport == "inproc" and direct.transport == "direct"
    assert [s.label for s in direct.steps] == [s.label for s in inproc.steps]
    differing = [
        f"{a.label}:\n  inproc: {a.answer!r}\n  direct: {b.answer!r}"
        for a, b in zip(inproc.steps, direct.steps, strict=True)
        if a.answer != b.answer
    ]
    assert not differing, "the transports answered differently:\n" + "\n".join(differing)
    assert [s.label for s in inproc.steps if not s.wire] == []
    assert {s.label for s in direct.steps if s.wire} == direct_over_wire


# --------------------------------------------------------------------------------------- DynamoDB
def _run(run_id: str, **attrs: str) -> dict[str, Any]:
    return {"run_id": {"S": run_id}, **{k: {"S": v} for k, v in attrs.items()}}


def _pages(t: Transcript, label: str, operation: Callable[..., Any], **params: Any) -> None:
    for page in range(1, 10):
        answer = t.call(f"{label} #{page}", operation, **params)
        if "LastEvaluatedKey" not in answer:
            return
        params["ExclusiveStartKey"] = answer["LastEvaluatedKey"]
    raise AssertionError(f"{label}: more pages than items")


@script
def dynamodb(t: Transcript) -> None:
    ddb, settings = t.ddb, t.stack.settings
    runs, audit, outbox = settings.table("runs"), settings.table("audit"), settings.table("outbox")
    key = {"run_id": {"S": "r1"}}

    t.call("get miss", ddb.get_item, TableName=runs, Key=key, ConsistentRead=True)
    t.call("put", ddb.put_item, TableName=runs, Item=_run("r1", task_id="t1", state="pending"))
    t.call("get hit", ddb.get_item, TableName=runs, Key=key, ConsistentRead=True)
    t.call(
        "put if absent (absent)",
        ddb.put_item,
        TableName=runs,
        Item=_run("r2", task_id="t1", state="running"),
        ConditionExpression="attribute_not_exists(run_id)",
    )
    t.call(
        "put if absent (present)",
        ddb.put_item,
        TableName=runs,
        Item=_run("r1", task_id="t1", state="clobbered"),
        ConditionExpression="attribute_not_exists(run_id)",
    )
    t.call(
        "put if state matches (it does)",
        ddb.put_item,
        TableName=runs,
        Item=_run("r2", task_id="t1", state="failed", updated_at="2026-03-07T09:01:00Z"),
        ConditionExpression="#s = :s",
        ExpressionAttributeNames={"#s": "state"},
        ExpressionAttributeValues={":s": {"S": "running"}},
    )
    t.call(
        "put if state matches (it does not)",
        ddb.put_item,
        TableName=runs,
        Item=_run("r2", task_id="t1", state="succeeded"),
        ConditionExpression="#s = :s",
        ExpressionAttributeNames={"#s": "state"},
        ExpressionAttributeValues={":s": {"S": "running"}},
    )
    t.call("get after the failed puts", ddb.get_item, TableName=runs, Key=key)
    t.call("get r2", ddb.get_item, TableName=runs, Key={"run_id": {"S": "r2"}})

    for returns in ("ALL_NEW", "UPDATED_OLD", "UPDATED_NEW", "ALL_OLD", "NONE"):
        t.call(
            f"update {returns}",
            ddb.update_item,
            TableName=runs,
            Key=key,
            UpdateExpression="SET attempts = if_not_exists(attempts, :zero) + :one, #s = :s",
            ExpressionAttributeNames={"#s": "state"},
            ExpressionAttributeValues={":zero": {"N": "0"}, ":one": {"N": "1"}, ":s": {"S": returns}},
            ReturnValues=returns,
        )
    t.call(
        "update with a failing condition",
        ddb.update_item,
        TableName=runs,
        Key=key,
        UpdateExpression="SET attempts = :n",
        ConditionExpression="attempts = :other",
        ExpressionAttributeValues={":n": {"N": "99"}, ":other": {"N": "42"}},
        ReturnValues="ALL_NEW",
    )

    t.call(
        "transaction",
        ddb.transact_write_items,
        TransactItems=[
            {"Put": {"TableName": outbox, "Item": {"event_id": {"S": "e1"}, "detail": {"S": "{}"}}}},
            {
                "Update": {
                    "TableName": runs,
                    "Key": key,
                    "UpdateExpression": "SET #s = :s",
                    "ConditionExpression": "attempts = :n",
                    "ExpressionAttributeNames": {"#s": "state"},
                    "ExpressionAttributeValues": {":s": {"S": "succeeded"}, ":n": {"N": "5"}},
                }
            },
            {
                "ConditionCheck": {
                    "TableName": runs,
                    "Key": {"run_id": {"S": "r2"}},
                    "ConditionExpression": "attribute_exists(run_id)",
                }
            },
            {"Delete": {"TableName": runs, "Key": {"run_id": {"S": "gone"}}}},
        ],
    )
    t.call(
        "cancelled transaction",
        ddb.transact_write_items,
        TransactItems=[
            {"Put": {"TableName": outbox, "Item": {"event_id": {"S": "e2"}}}},
            {
                "Put": {
                    "TableName": runs,
                    "Item": _run("r1", state="lost"),
                    "ConditionExpression": "#s = :s",
                    "ExpressionAttributeNames": {"#s": "state"},
                    "ExpressionAttributeValues": {":s": {"S": "pending"}},
                }
            },
            {
                "ConditionCheck": {
                    "TableName": runs,
                    "Key": {"run_id": {"S": "nope"}},
                    "ConditionExpression": "attribute_exists(run_id)",
                }
            },
        ],
    )
    t.call(
        "cancelled transaction returning the old item",
        ddb.transact_write_items,
        TransactItems=[
            {
                "ConditionCheck": {
                    "TableName": runs,
                    "Key": key,
                    "ConditionExpression": "attribute_not_exists(run_id)",
                    "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                }
            },
        ],
    )
    t.call("outbox after the transactions", ddb.scan, TableName=outbox)
    t.call("r1 after the transactions", ddb.get_item, TableName=runs, Key=key)

    # Pages of a hash-and-range table, and of a global secondary index.
    for seq in range(1, 6):
        t.call(
            f"append audit {seq}",
            ddb.put_item,
            TableName=audit,
            Item={"subject": {"S": "run#r1"}, "seq": {"N": str(seq)}, "hash": {"S": f"h{seq}"}},
            ConditionExpression="attribute_not_exists(seq)",
        )
    t.call(
        "append audit 3 again",
        ddb.put_item,
        TableName=audit,
        Item={"subject": {"S": "run#r1"}, "seq": {"N": "3"}},
        ConditionExpression="attribute_not_exists(seq)",
    )
    t.call(
        "audit head",
        ddb.query,
        TableName=audit,
        KeyConditionExpression="subject = :s",
        ExpressionAttributeValues={":s": {"S": "run#r1"}},
        ScanIndexForward=False,
        Limit=1,
        ConsistentRead=True,
    )
    _pages(
        t,
        "audit pages",
        ddb.query,
        TableName=audit,
        KeyConditionExpression="subject = :s AND seq > :after",
        ExpressionAttributeValues={":s": {"S": "run#r1"}, ":after": {"N": "1"}},
        Limit=2,
    )
    for n in range(3, 8):
        t.call(
            f"put run r{n}",
            ddb.put_item,
            TableName=runs,
            Item=_run(f"r{n}", task_id="t1", scheduled_for=f"2026-03-07T09:0{n}:00Z", state="pending"),
        )
    _pages(
        t,
        "by_task pages",
        ddb.query,
        TableName=runs,
        IndexName="by_task_keys",
        KeyConditionExpression="task_id = :t AND scheduled_for >= :from",
        ExpressionAttributeValues={":t": {"S": "t1"}, ":from": {"S": "2026-03-07T09:04:00Z"}},
        Limit=2,
    )
    _pages(
        t,
        "by_state pages, filtered and projected",
        ddb.query,
        TableName=runs,
        IndexName="by_state",
        KeyConditionExpression="#s = :s",
        FilterExpression="task_id = :t",
        ProjectionExpression="run_id, #s",
        ExpressionAttributeNames={"#s": "state"},
        ExpressionAttributeValues={":s": {"S": "pending"}, ":t": {"S": "t1"}},
        Limit=2,
    )
    t.call(
        "query on a non-key attribute",
        ddb.query,
        TableName=runs,
        KeyConditionExpression="task_id = :t",
        ExpressionAttributeValues={":t": {"S": "t1"}},
    )

    t.call(
        "batch get",
        ddb.batch_get_item,
        RequestItems={
            runs: {
                "Keys": [{"run_id": {"S": "r3"}}, {"run_id": {"S": "missing"}}, key],
                "ConsistentRead": True,
            },
            audit: {"Keys": [{"subject": {"S": "run#r1"}, "seq": {"N": "2"}}]},
        },
    )
    t.call(
        "batch write",
        ddb.batch_write_item,
        RequestItems={
            runs: [
                {"PutRequest": {"Item": _run("r8", task_id="t2")}},
                {"DeleteRequest": {"Key": {"run_id": {"S": "r7"}}}},
            ]
        },
    )
    t.call("delete", ddb.delete_item, TableName=runs, Key={"run_id": {"S": "r3"}})
    t.call("get deleted", ddb.get_item, TableName=runs, Key={"run_id": {"S": "r3"}})
    t.call("delete missing", ddb.delete_item, TableName=runs, Key={"run_id": {"S": "r3"}})
    _pages(t, "scan pages", ddb.scan, TableName=runs, Limit=3)
    t.call(
        "scan filtered",
        ddb.scan,
        TableName=runs,
        FilterExpression="task_id = :t",
        ExpressionAttributeValues={":t": {"S": "t1"}},
    )
    t.call("get from a missing table", ddb.get_item, TableName="no-such-table", Key=key)
    t.call("put to a missing table", ddb.put_item, TableName="no-such-table", Item=key)
    t.call("put without the key", ddb.put_item, TableName=runs, Item={"state": {"S": "x"}})
    t.call("put a key of the wrong type", ddb.put_item, TableName=runs, Item={"run_id": {"N": "1"}})
    t.call(
        "transaction writing one item twice",
        ddb.transact_write_items,
        TransactItems=[
            {"Put": {"TableName": runs, "Item": _run("twice")}},
            {"Delete": {"TableName": runs, "Key": {"run_id": {"S": "twice"}}}},
        ],
    )


def test_dynamodb_answers_the_same_on_both_transports(runs: Runs) -> None:
    inproc, direct = runs.pair("dynamodb")
    assert_same_answers(inproc, direct)

    # The comparison only means something if the script hit what it meant to (on the wire).
    settings = inproc.stack.settings
    assert inproc.answer("get miss") == {}
    assert inproc.answer("get hit")["Item"]["state"] == {"S": "pending"}
    assert error_code(inproc.answer("put if absent (present)")) == "ConditionalCheckFailedException"
    assert (
        error_code(inproc.answer("put if state matches (it does not)")) == "ConditionalCheckFailedException"
    )
    assert inproc.answer("get after the failed puts")["Item"]["state"] == {"S": "pending"}
    assert inproc.answer("get r2")["Item"]["state"] == {"S": "failed"}
    assert inproc.answer("update ALL_NEW")["Attributes"]["attempts"] == {"N": "1"}
    assert inproc.answer("update UPDATED_OLD")["Attributes"] == {
        "attempts": {"N": "1"},
        "state": {"S": "ALL_NEW"},
    }
    assert "Attributes" not in inproc.answer("update NONE")
    assert error_code(inproc.answer("update with a failing condition")) == "ConditionalCheckFailedException"
    assert inproc.answer("transaction") == {}
    cancelled = inproc.answer("cancelled transaction")
    assert error_code(cancelled) == "TransactionCanceledException"
    assert [r["Code"] for r in cancelled["CancellationReasons"]] == [
        "None",
        "ConditionalCheckFailed",
        "ConditionalCheckFailed",
    ]
    [reason] = inproc.answer("cancelled transaction returning the old item")["CancellationReasons"]
    assert reason["Item"]["state"] == {"S": "succeeded"}
    assert [e["event_id"] for e in inproc.answer("outbox after the transactions")["Items"]] == [{"S": "e1"}]
    assert error_code(inproc.answer("append audit 3 again")) == "ConditionalCheckFailedException"
    assert [i["seq"] for i in inproc.answer("audit head")["Items"]] == [{"N": "5"}]
    assert [i["seq"]["N"] for i in inproc.answer("audit pages #2")["Items"]] == ["4", "5"]
    assert "LastEvaluatedKey" in inproc.answer("by_task pages #1")
    assert error_code(inproc.answer("query on a non-key attribute")) == "ValidationException"
    batch = inproc.answer("batch get")["Responses"]
    assert sorted(i["run_id"]["S"] for i in batch[settings.table("runs")]) == ["r1", "r3"]
    assert inproc.answer("get deleted") == {}
    assert error_code(inproc.answer("get from a missing table")) == "ResourceNotFoundException"
    assert error_code(inproc.answer("put a key of the wrong type")) == "ValidationException"
    assert error_code(inproc.answer("transaction writing one item twice")) == "ValidationException"


# -------------------------------------------------------------------------------------------- SQS
ATTRIBUTES = {
    "kind": {"DataType": "String", "StringValue": "fire"},
    "attempt": {"DataType": "Number", "StringValue": "2"},
    "blob": {"DataType": "Binary", "BinaryValue": b"\x00\xffrebound"},
}
ALL = {"MessageAttributeNames": ["All"], "MessageSystemAttributeNames": ["All"]}  # as Queues.peek asks


def _handles(answer: dict[str, Any]) -> list[str]:
    return [m["ReceiptHandle"] for m in answer.get("Messages", [])]


@script
def sqs(t: Transcript) -> None:
    sqs, url = t.sqs, t.stack.settings.queue("execution").url  # redrives to dlq after 5 receives
    dlq = t.stack.settings.queue("dlq").url

    t.call("send delayed", sqs.send_message, QueueUrl=url, MessageBody='{"n": 1}', DelaySeconds=60)
    t.call(
        "send with attributes",
        sqs.send_message,
        QueueUrl=url,
        MessageBody='{"n": 2}',
        MessageAttributes=ATTRIBUTES,
        DelaySeconds=0,
    )
    t.call(
        "send delayed with attributes",
        sqs.send_message,
        QueueUrl=url,
        MessageBody='{"n": 3}',
        DelaySeconds=120,
        MessageAttributes={"kind": ATTRIBUTES["kind"]},
    )
    t.call("send plain", sqs.send_message, QueueUrl=url, MessageBody='{"n": 4}')
    done = _handles(
        t.call("receive one of two", sqs.receive_message, QueueUrl=url, MaxNumberOfMessages=1, **ALL)
    )
    done += _handles(
        t.call("receive the other", sqs.receive_message, QueueUrl=url, MaxNumberOfMessages=10, **ALL)
    )
    t.advance(61)
    done += _handles(
        t.call(
            "receive after the first delay", sqs.receive_message, QueueUrl=url, MaxNumberOfMessages=10, **ALL
        )
    )
    t.call("receive nothing visible", sqs.receive_message, QueueUrl=url, MaxNumberOfMessages=10, **ALL)
    t.advance(60)
    [handle] = _handles(
        t.call(
            "receive named attributes",
            sqs.receive_message,
            QueueUrl=url,
            MaxNumberOfMessages=10,
            VisibilityTimeout=30,
            MessageAttributeNames=["kind", "attempt"],
            MessageSystemAttributeNames=["All"],
        )
    )
    t.call("release", sqs.change_message_visibility, QueueUrl=url, ReceiptHandle=handle, VisibilityTimeout=0)
    t.advance(1)  # moto: visible once the clock is past the visibility deadline, not on it
    [handle] = _handles(
        t.call("receive released", sqs.receive_message, QueueUrl=url, MaxNumberOfMessages=10, **ALL)
    )
    t.call("extend", sqs.change_message_visibility, QueueUrl=url, ReceiptHandle=handle, VisibilityTimeout=45)
    hold = [
        {"Id": "held", "ReceiptHandle": handle, "VisibilityTimeout": 45},  # as "extend", at the same time
        {"Id": "too-long", "ReceiptHandle": handle, "VisibilityTimeout": 12 * 3600 + 1},
    ]
    t.call("hold a batch", sqs.change_message_visibility_batch, QueueUrl=url, Entries=hold)
    t.advance(40)
    t.call("receive while extended", sqs.receive_message, QueueUrl=url, MaxNumberOfMessages=10, **ALL)
    t.advance(10)
    [handle] = _handles(
        t.call(
            "long poll with a message waiting", sqs.receive_message, QueueUrl=url, WaitTimeSeconds=5, **ALL
        )
    )
    t.call("delete", sqs.delete_message, QueueUrl=url, ReceiptHandle=handle)
    t.call("delete again", sqs.delete_message, QueueUrl=url, ReceiptHandle=handle)
    t.call("delete an invalid handle", sqs.delete_message, QueueUrl=url, ReceiptHandle="not-a-handle")
    for n, earlier in enumerate(done):
        t.call(f"delete earlier #{n}", sqs.delete_message, QueueUrl=url, ReceiptHandle=earlier)

    t.call("send to dead-letter", sqs.send_message, QueueUrl=url, MessageBody='{"n": 5}')
    for attempt in range(1, 7):
        t.call(f"receive #{attempt}", sqs.receive_message, QueueUrl=url, VisibilityTimeout=1, **ALL)
        t.advance(2)
    t.call("receive dead letter", sqs.receive_message, QueueUrl=dlq, MaxNumberOfMessages=10, **ALL)
    _queue_attributes(t, url, dlq)


COUNTS = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]


def _queue_attributes(t: Transcript, url: str, dlq: str) -> None:
    """The sweeper's reads of the counts (visible, in flight, delayed), and the attribute errors."""
    sqs = t.sqs
    t.call("send delayed for counts", sqs.send_message, QueueUrl=url, MessageBody='{"n": 6}', DelaySeconds=30)
    t.call("send visible for counts", sqs.send_message, QueueUrl=url, MessageBody='{"n": 7}')
    t.call("send in flight", sqs.send_message, QueueUrl=url, MessageBody='{"n": 8}')
    t.call("take one in flight", sqs.receive_message, QueueUrl=url, MaxNumberOfMessages=1, **ALL)
    delayed = [*COUNTS, "ApproximateNumberOfMessagesDelayed"]
    t.call("counts", sqs.get_queue_attributes, QueueUrl=url, AttributeNames=delayed)
    t.call("depth", sqs.get_queue_attributes, QueueUrl=url, AttributeNames=COUNTS)
    t.call("dead-letter depth", sqs.get_queue_attributes, QueueUrl=dlq, AttributeNames=COUNTS)
    t.call("every attribute", sqs.get_queue_attributes, QueueUrl=dlq, AttributeNames=["All"])
    t.call("arn", sqs.get_queue_attributes, QueueUrl=url, AttributeNames=["QueueArn"])
    t.call("unknown attribute", sqs.get_queue_attributes, QueueUrl=url, AttributeNames=["Colour"])
    t.call("empty attribute name", sqs.get_queue_attributes, QueueUrl=url, AttributeNames=[""])
    t.call("no names", sqs.get_queue_attributes, QueueUrl=url)
    t.call("missing queue", sqs.get_queue_attributes, QueueUrl=url + "-nope", AttributeNames=COUNTS)


SQS_OVER_WIRE = frozenset(  # no direct implementation of these: the direct client falls back to botocore
    {"long poll with a message waiting", "delete", "delete again", "delete an invalid handle"}
    | {f"delete earlier #{n}" for n in range(3)}
)


def test_sqs_answers_the_same_on_both_transports(runs: Runs) -> None:
    inproc, direct = runs.pair("sqs")
    assert_same_answers(inproc, direct, direct_over_wire=SQS_OVER_WIRE)

    def bodies(label: str) -> list[str]:
        return [m["Body"] for m in inproc.answer(label).get("Messages", [])]

    [first] = inproc.answer("receive one of two")["Messages"]
    assert first["Body"] == '{"n": 2}'
    assert first["MessageId"] == inproc.answer("send with attributes")["MessageId"]
    assert first["MessageAttributes"] == ATTRIBUTES
    assert first["Attributes"]["ApproximateReceiveCount"] == "1"
    assert first["Attributes"]["SentTimestamp"] == str(int(inproc.began.timestamp() * 1000))
    assert bodies("receive the other") == ['{"n": 4}']
    assert bodies("receive after the first delay") == ['{"n": 1}']
    assert bodies("receive nothing visible") == []
    [named] = inproc.answer("receive named attributes")["Messages"]
    assert named["MessageAttributes"] == {"kind": ATTRIBUTES["kind"]}
    [released] = inproc.answer("receive released")["Messages"]
    assert released["Attributes"]["ApproximateReceiveCount"] == "2"
    assert released["ReceiptHandle"] != named["ReceiptHandle"]
    assert bodies("receive while extended") == []
    assert bodies("long poll with a message waiting") == ['{"n": 3}']
    assert inproc.answer("delete again") == {}
    assert error_code(inproc.answer("delete an invalid handle")) == "ReceiptHandleIsInvalid"
    assert [bodies(f"receive #{n}") for n in range(1, 7)] == [['{"n": 5}']] * 5 + [[]]
    [dead] = inproc.answer("receive dead letter")["Messages"]
    assert (dead["Body"], dead["Attributes"]["ApproximateReceiveCount"]) == ('{"n": 5}', "6")
    counts = inproc.answer("counts")["Attributes"]
    assert counts["ApproximateNumberOfMessages"] == "1"
    assert counts["ApproximateNumberOfMessagesNotVisible"] == "1"
    assert counts["ApproximateNumberOfMessagesDelayed"] == "1"
    dead_letters = inproc.answer("dead-letter depth")["Attributes"]  # received just before: in flight
    dead_visible = dead_letters["ApproximateNumberOfMessages"]
    assert (dead_visible, dead_letters["ApproximateNumberOfMessagesNotVisible"]) == ("0", "1")
    execution = inproc.stack.settings.queue("execution")
    assert inproc.answer("arn")["Attributes"]["QueueArn"] == execution.arn
    assert error_code(inproc.answer("unknown attribute")) == "InvalidAttributeName"
    assert error_code(inproc.answer("missing queue")) is not None


# ------------------------------------------------------------------------------------ EventBridge
def _routed(t: Transcript) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """A received rule delivery, its body parsed: the event id in it is random, so it is aliased
    like the EventId PutEvents returned, and the body's MD5 (of a random id) is dropped."""

    def shape(answer: dict[str, Any]) -> dict[str, Any]:
        messages = []
        for message in answer.get("Messages", []):
            event = json.loads(message["Body"])
            event["id"] = t.alias("EventId", event["id"])
            rest = {k: v for k, v in message.items() if k not in ("Body", "MD5OfBody")}
            messages.append({**rest, "Event": event})
        return {**answer, "Messages": messages}

    return shape


@script
def eventbridge(t: Transcript) -> None:
    bus = t.stack.settings.bus_name
    failed_run = {"Source": r.SPEC.event_source, "DetailType": "task.execution.failed", "EventBusName": bus}
    t.call(
        "put",
        t.events.put_events,
        Entries=[
            {**failed_run, "Detail": '{"run_id": "r1"}'},
            {**failed_run, "DetailType": "task.dead_lettered", "Detail": '{"run_id": "r2"}'},
            {**failed_run, "DetailType": "nobody.listens", "Detail": "{}"},
        ],
    )
    t.call(
        "put with failing entries",
        t.events.put_events,
        Entries=[
            {**failed_run, "Detail": '{"run_id": "r3"}'},
            {**failed_run, "Detail": "not json"},
            {"Source": r.SPEC.event_source, "Detail": "{}", "EventBusName": bus},
        ],
    )
    t.call(
        "put to a missing bus",
        t.events.put_events,
        Entries=[{**failed_run, "EventBusName": "nope", "Detail": "{}"}],
    )
    t.call("put eleven", t.events.put_events, Entries=[{**failed_run, "Detail": "{}"}] * 11)
    for queue in ("retry", "escalation"):
        t.call(
            f"routed to {queue}",
            t.sqs.receive_message,
            shape=_routed(t),
            QueueUrl=t.stack.settings.queue(queue).url,
            MaxNumberOfMessages=10,
            **ALL,
        )


def test_eventbridge_answers_the_same_on_both_transports(runs: Runs) -> None:
    inproc, direct = runs.pair("eventbridge")
    assert_same_answers(inproc, direct)

    put = inproc.answer("put")
    assert put["FailedEntryCount"] == 0
    assert [set(e) for e in put["Entries"]] == [{"EventId"}] * 3
    failing = inproc.answer("put with failing entries")
    assert failing["FailedEntryCount"] == 2
    assert ["ErrorCode" in e for e in failing["Entries"]] == [False, True, True]
    # moto rejects the whole call for a missing bus (AWS reports it per entry); both transports agree.
    assert error_code(inproc.answer("put to a missing bus")) == "ResourceNotFoundException"
    assert error_code(inproc.answer("put eleven")) == "ValidationException"
    routed = inproc.answer("routed to retry")["Messages"]
    assert [m["Event"]["detail"] for m in routed] == [{"run_id": "r1"}, {"run_id": "r3"}]
    assert routed[0]["Event"]["id"] == put["Entries"][0]["EventId"]
    [escalated] = inproc.answer("routed to escalation")["Messages"]
    assert escalated["Event"]["detail-type"] == "task.dead_lettered"


# -------------------------------------------------------------------------------------- Scheduler
APP_FIELDS = (  # what rebound.adapters.scheduler reads back from GetSchedule, or the app relies on
    "Name",
    "GroupName",
    "ScheduleExpression",
    "ScheduleExpressionTimezone",
    "State",
    "Target",
    "FlexibleTimeWindow",
    "ActionAfterCompletion",
)


def _target(t: Transcript, payload: str) -> dict[str, Any]:
    """A target as ``Schedules._target`` builds it."""
    settings = t.stack.settings
    return {
        "Arn": settings.queue("execution").arn,
        "RoleArn": settings.scheduler_role_arn,
        "Input": payload,
        "RetryPolicy": {"MaximumRetryAttempts": 3, "MaximumEventAgeInSeconds": 3600},
        "DeadLetterConfig": {"Arn": settings.queue("scheduler_dlq").arn},
    }


@script
def scheduler(t: Transcript) -> None:
    sch, group = t.scheduler, t.stack.settings.schedule_group
    recurring = {
        "Name": "task-tick",
        "GroupName": group,
        "ScheduleExpression": "cron(*/5 * * * ? *)",
        "ScheduleExpressionTimezone": "Europe/Paris",
        "FlexibleTimeWindow": {"Mode": "FLEXIBLE", "MaximumWindowInMinutes": 5},
        "Target": _target(t, '{"kind":"fire","task_id":"tick"}'),
        "State": "ENABLED",
        "Description": "every five minutes",
    }
    one_time = {
        "Name": "retry-r1-2",
        "GroupName": group,
        "ScheduleExpression": "at(2026-03-07T09:30:00)",
        "ScheduleExpressionTimezone": "UTC",
        "FlexibleTimeWindow": {"Mode": "OFF"},
        "Target": _target(t, '{"kind":"retry","run_id":"r1"}'),
        "ActionAfterCompletion": "DELETE",
        "State": "ENABLED",
        "Description": "Rebound retry",
    }
    t.call("get before create", sch.get_schedule, Name="task-tick", GroupName=group)
    t.call("create recurring", sch.create_schedule, **recurring)
    t.call("create one-time", sch.create_schedule, **one_time)
    t.call("get recurring", sch.get_schedule, Name="task-tick", GroupName=group)
    t.call("get one-time", sch.get_schedule, Name="retry-r1-2", GroupName=group)
    t.call("create existing", sch.create_schedule, **{**recurring, "Description": "again"})
    t.advance(90)
    t.call(
        "update",
        sch.update_schedule,
        **{
            **recurring,
            "ScheduleExpression": "rate(10 minutes)",
            "ScheduleExpressionTimezone": "UTC",
            "FlexibleTimeWindow": {"Mode": "OFF"},
            "Target": _target(t, '{"kind":"fire","task_id":"tick","v":2}'),
            "State": "DISABLED",
        },
    )
    t.call("get updated", sch.get_schedule, Name="task-tick", GroupName=group)
    t.call("update missing", sch.update_schedule, **{**recurring, "Name": "nope"})
    minimal = {k: one_time[k] for k in ("Name", "ScheduleExpression", "FlexibleTimeWindow")}
    t.call(
        "create in the default group",
        sch.create_schedule,
        **minimal,
        Target={"Arn": one_time["Target"]["Arn"], "RoleArn": one_time["Target"]["RoleArn"]},
    )
    t.call("get from the default group", sch.get_schedule, Name="retry-r1-2")
    t.call("list the group", sch.list_schedules, GroupName=group)
    t.call("list by prefix", sch.list_schedules, GroupName=group, NamePrefix="retry-")
    first = t.call("list a page of one", sch.list_schedules, GroupName=group, MaxResults=1)
    t.call(
        "list the next page", sch.list_schedules, GroupName=group, MaxResults=1, NextToken=first["NextToken"]
    )
    t.call("list disabled", sch.list_schedules, GroupName=group, State="DISABLED")
    t.call("list every group", sch.list_schedules)
    t.call("list a missing group", sch.list_schedules, GroupName="no-such-group")
    t.call("delete", sch.delete_schedule, Name="task-tick", GroupName=group)
    t.call("get deleted", sch.get_schedule, Name="task-tick", GroupName=group)
    t.call("delete deleted", sch.delete_schedule, Name="task-tick", GroupName=group)
    t.call("get from a missing group", sch.get_schedule, Name="retry-r1-2", GroupName="no-such-group")
    t.call("delete from a missing group", sch.delete_schedule, Name="retry-r1-2", GroupName="no-such-group")
    t.call("update in a missing group", sch.update_schedule, **{**recurring, "GroupName": "no-such-group"})


def test_scheduler_answers_the_same_on_both_transports(runs: Runs) -> None:
    inproc, direct = runs.pair("scheduler")
    assert_same_answers(inproc, direct)

    for transcript in (inproc, direct):
        for label in ("get recurring", "get one-time", "get updated", "get from the default group"):
            for key in ("CreationDate", "LastModificationDate"):
                value = transcript.answer(label)[key]
                assert isinstance(value, datetime), (transcript.transport, label, key)
                assert value.tzinfo is not None, (transcript.transport, label, key)

    group = inproc.stack.settings.schedule_group
    assert error_code(inproc.answer("get before create")) == "ResourceNotFoundException"
    assert inproc.answer("create recurring") == {
        "ScheduleArn": f"arn:aws:scheduler:us-east-1:123456789012:schedule/{group}/task-tick"
    }
    recurring = inproc.answer("get recurring")
    assert {k: recurring[k] for k in APP_FIELDS if k in recurring} == {
        "Name": "task-tick",
        "GroupName": group,
        "ScheduleExpression": "cron(*/5 * * * ? *)",
        "ScheduleExpressionTimezone": "Europe/Paris",
        "State": "ENABLED",
        "Target": _target(inproc, '{"kind":"fire","task_id":"tick"}'),
        "FlexibleTimeWindow": {"Mode": "FLEXIBLE", "MaximumWindowInMinutes": 5},
    }
    assert recurring["CreationDate"] == recurring["LastModificationDate"] == inproc.began
    assert inproc.answer("get one-time")["ActionAfterCompletion"] == "DELETE"
    assert error_code(inproc.answer("create existing")) == "ConflictException"
    updated = inproc.answer("get updated")
    assert (updated["State"], updated["ScheduleExpression"]) == ("DISABLED", "rate(10 minutes)")
    assert updated["Target"]["Input"] == '{"kind":"fire","task_id":"tick","v":2}'
    assert updated["CreationDate"] == inproc.began
    assert updated["LastModificationDate"] == inproc.began + timedelta(seconds=90)
    assert error_code(inproc.answer("update missing")) == "ResourceNotFoundException"
    default = inproc.answer("get from the default group")
    assert (default["GroupName"], default["ScheduleExpressionTimezone"], default["State"]) == (
        "default",
        "UTC",
        "ENABLED",
    )
    assert sorted(s["Name"] for s in inproc.answer("list the group")["Schedules"]) == [
        "retry-r1-2",
        "task-tick",
    ]
    [disabled] = inproc.answer("list disabled")["Schedules"]
    assert disabled["Name"] == "task-tick" and set(disabled["Target"]) == {"Arn"}
    assert [s["Name"] for s in inproc.answer("list by prefix")["Schedules"]] == ["retry-r1-2"]
    pages = [inproc.answer(label)["Schedules"] for label in ("list a page of one", "list the next page")]
    assert sorted(page[0]["Name"] for page in pages) == ["retry-r1-2", "task-tick"]
    assert "NextToken" not in inproc.answer("list the next page")
    assert len(inproc.answer("list every group")["Schedules"]) == 3  # the default group's too
    assert inproc.answer("list a missing group")["Schedules"] == []
    assert error_code(inproc.answer("get deleted")) == "ResourceNotFoundException"
    assert error_code(inproc.answer("delete deleted")) == "ResourceNotFoundException"
    assert error_code(inproc.answer("get from a missing group")) == "ResourceNotFoundException"


# --------------------------------------------------------------------------- hostile mode (moto-level)
@script
def hostile_dynamodb(t: Transcript) -> None:
    """Transaction conflicts and index lag act inside moto, so both transports meet them alike."""
    ddb, runs = t.ddb, t.stack.settings.table("runs")
    key = {"run_id": {"S": "h1"}}
    t.call("put before the faults", ddb.put_item, TableName=runs, Item=_run("h1", task_id="th", state="ok"))
    hostile.activate(MotoFaults(transaction_conflict=0.999, seed=5))
    try:
        t.call(
            "conflicting transaction",
            ddb.transact_write_items,
            TransactItems=[
                {"Put": {"TableName": runs, "Item": _run("h2", state="pending")}},
                {"Put": {"TableName": runs, "Item": _run("h3", state="pending")}},
                {"Delete": {"TableName": runs, "Key": key}},
            ],
        )
        t.call(
            "conflicting conditional put",
            ddb.put_item,
            TableName=runs,
            Item=_run("h4", state="pending"),
            ConditionExpression="attribute_not_exists(run_id)",
        )
        t.call(
            "conflicting conditional update",
            ddb.update_item,
            TableName=runs,
            Key=key,
            UpdateExpression="SET #s = :s",
            ConditionExpression="attribute_exists(run_id)",
            ExpressionAttributeNames={"#s": "state"},
            ExpressionAttributeValues={":s": {"S": "later"}},
        )
        t.call(
            "conflicting conditional delete",
            ddb.delete_item,
            TableName=runs,
            Key=key,
            ConditionExpression="attribute_exists(run_id)",
        )
        t.call("unconditional put", ddb.put_item, TableName=runs, Item=_run("h5", task_id="th", state="ok"))
    finally:
        hostile.activate(None)
    t.call("nothing of the conflicts was written", ddb.scan, TableName=runs, ConsistentRead=True)

    hostile.activate(MotoFaults(index_lag_s=2.0))
    try:
        query = {
            "TableName": runs,
            "IndexName": "by_state",
            "KeyConditionExpression": "#s = :s",
            "ExpressionAttributeNames": {"#s": "state"},
            "ExpressionAttributeValues": {":s": {"S": "ok"}},
        }
        t.call("index before the write", ddb.query, **query)
        t.call(
            "write", ddb.put_item, TableName=runs, Item=_run("h6", task_id="th", state="ok", updated_at="u")
        )
        t.call("index at once", ddb.query, **query)
        t.call("base table at once", ddb.get_item, TableName=runs, Key={"run_id": {"S": "h6"}})
        t.advance(2.5)
        t.call("index after the lag", ddb.query, **query)
    finally:
        hostile.activate(None)


def test_injected_conflicts_and_index_lag_answer_the_same_on_both_transports(runs: Runs) -> None:
    inproc, direct = runs.pair("hostile_dynamodb")
    assert_same_answers(inproc, direct)

    cancelled = inproc.answer("conflicting transaction")
    assert error_code(cancelled) == "TransactionCanceledException"
    codes = [reason["Code"] for reason in cancelled["CancellationReasons"]]
    assert sorted(codes) == ["None", "None", "TransactionConflict"]
    for label in (
        "conflicting conditional put",
        "conflicting conditional update",
        "conflicting conditional delete",
    ):
        assert error_code(inproc.answer(label)) == "TransactionConflictException", label
    assert "error" not in inproc.answer("unconditional put")
    scanned = inproc.answer("nothing of the conflicts was written")["Items"]
    stored = {i["run_id"]["S"]: i["state"]["S"] for i in scanned if i["run_id"]["S"].startswith("h")}
    assert stored == {"h1": "ok", "h5": "ok"}

    def ids(label: str) -> set[str]:
        return {item["run_id"]["S"] for item in inproc.answer(label)["Items"]}

    assert "h6" not in ids("index at once")
    assert inproc.answer("base table at once")["Item"]["state"] == {"S": "ok"}
    assert "h6" in ids("index after the lag")


@script
def hostile_sqs(t: Transcript) -> None:
    """Only a message's latest receipt handle acts on it (DeleteMessage / ChangeMessageVisibility)."""
    sqs, url = t.sqs, t.stack.settings.queue("retry").url
    t.call("send", sqs.send_message, QueueUrl=url, MessageBody="stale")
    [old] = _handles(t.call("first receive", sqs.receive_message, QueueUrl=url, VisibilityTimeout=1, **ALL))
    t.advance(2)
    [new] = _handles(t.call("second receive", sqs.receive_message, QueueUrl=url, VisibilityTimeout=1, **ALL))
    hostile.activate(MotoFaults(latest_receipt_only=True))
    try:
        sent = len(t.sent)
        try:
            sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=old, VisibilityTimeout=60)
            t.record("extend with the old handle", "accepted", wire=len(t.sent) > sent)
        except ClientError as exc:  # the message names the (random) handle
            error = t._error(exc)
            error["Message"] = error["Message"].replace(old, "<the old handle>")
            t.record("extend with the old handle", error, wire=len(t.sent) > sent)
        t.call("delete with the old handle", sqs.delete_message, QueueUrl=url, ReceiptHandle=old)
        t.advance(2)
        t.call("still there", sqs.receive_message, QueueUrl=url, VisibilityTimeout=30, **ALL)
        t.call("delete with a stale handle again", sqs.delete_message, QueueUrl=url, ReceiptHandle=new)
    finally:
        hostile.activate(None)


def test_a_stale_receipt_handle_answers_the_same_on_both_transports(runs: Runs) -> None:
    inproc, direct = runs.pair("hostile_sqs")
    assert_same_answers(
        inproc,
        direct,
        direct_over_wire=frozenset({"delete with the old handle", "delete with a stale handle again"}),
    )
    stale = inproc.answer("extend with the old handle")
    assert error_code(stale) == "InvalidParameterValue"
    assert stale["Message"].startswith("Value <the old handle> for parameter ReceiptHandle is invalid")
    assert inproc.answer("delete with the old handle") == {}  # succeeds ...
    [again] = inproc.answer("still there")["Messages"]  # ... and deletes nothing
    assert again["Body"] == "stale" and again["Attributes"]["ApproximateReceiveCount"] == "3"
