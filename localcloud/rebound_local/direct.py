"""The ``direct`` transport: the handlers' hot-path AWS calls go straight to moto's backends.

A boto3 call to moto pays three times for the wire: botocore validates and serializes the request
and parses the response, and moto parses the request and serializes the response through the
service model. For a 5-item ``TransactWriteItems`` that is ~3 ms, against ~0.9 ms of actual work
in moto's DynamoDB backend; a ``GetItem`` is ~1.8 ms against 0.006 ms. The simulator runs tens
of thousands of runs, so for the calls every run makes (DynamoDB item reads and writes,
transactions, SQS sends and the executor's batch holds, EventBridge puts) this module calls the
same backend methods moto's response layer calls, under the same lock, and shapes the result like
boto3 does. Every other operation falls through to a regular in-process boto3 client, so nothing
is missing.

What stays exactly as on the wire: moto's condition and transaction semantics, stream records,
SQS delays, visibility and redrive, rule routing. What is skipped: botocore's client-side
parameter validation. The demo, ``rebound local up`` and the end-to-end tests use HTTP, so the
handlers are exercised on the real wire too; ``tests/integration/test_direct_transport.py`` runs
the same operations on both transports and compares the answers.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import ClientError
from moto.core.exceptions import ServiceException

from rebound_local import motopatch
from rebound_local.billing import Meter
from rebound_local.instrument import THROTTLE_CODES, AwsCalls, Throttler
from rebound_local.invocations import CallGate
from rebound_local.provision import ACCOUNT, REGION

MAX_ATTEMPTS = 5  # botocore's standard retry mode: 1 call + 4 retries


def _client_error(exc: Exception, operation: str) -> ClientError:
    """The botocore error a wire call would have raised for a moto exception."""
    error_type = str(getattr(exc, "error_type", type(exc).__name__))
    code = error_type.rsplit("#", 1)[-1]
    message = str(getattr(exc, "message", "") or exc)
    response: dict[str, Any] = {
        "Error": {"Code": code, "Message": message},
        "ResponseMetadata": {"HTTPStatusCode": int(getattr(exc, "code", 400) or 400)},
    }
    description = getattr(exc, "description", None)
    if isinstance(description, str) and description.startswith("{"):
        try:
            body = json.loads(description)
        except ValueError:
            body = {}
        if "CancellationReasons" in body:
            response["CancellationReasons"] = body["CancellationReasons"]
    return ClientError(response, operation)  # type: ignore[arg-type]


class _Direct:
    """Shared plumbing: counting, the call gate, injected throttling, botocore-style retries, error shapes."""

    service = ""
    gate: CallGate | None = None
    meter: Meter | None = None

    def __init__(self, fallback: Any, calls: AwsCalls, throttler: Throttler) -> None:
        self._fallback = fallback
        self._calls = calls
        self._throttler = throttler
        self.meta = fallback.meta
        self.exceptions = fallback.exceptions

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fallback, name)

    def _call(
        self, operation: str, fn: Callable[[], dict[str, Any]], params: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        self._calls.record(f"{self.service}:{operation}")
        if self.gate is not None:
            self.gate.before_call()  # abandoned invocation: SimulatedCrash; call time; interleaving
        for attempt in range(1, MAX_ATTEMPTS + 1):
            if self._throttler.hit(f"{self.service}:{operation}"):
                if attempt == MAX_ATTEMPTS:
                    code = THROTTLE_CODES.get(self.service, "ThrottlingException")
                    raise ClientError(
                        {"Error": {"Code": code, "Message": "Rate exceeded (injected by the simulator)"}},
                        operation,
                    )
                continue
            try:
                with motopatch.LOCK:
                    return self._metered(operation, fn, params or {})
            except ClientError:
                raise
            except Exception as exc:
                if hasattr(exc, "error_type") or hasattr(exc, "description"):
                    raise _client_error(exc, operation) from exc
                if isinstance(exc, ServiceException):
                    raise self._service_error(exc, operation) from exc
                raise
        raise AssertionError("unreachable")

    def _metered(
        self, operation: str, fn: Callable[[], dict[str, Any]], params: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Run the call, counting its billable units (``rebound_local.billing``), failed or not."""
        if self.meter is None:
            return fn()
        token = self.meter.before(self.service, operation, params)
        response: dict[str, Any] | None = None
        try:
            response = fn()
            return response
        finally:
            self.meter.after(self.service, operation, params, response, token)

    def _service_error(self, exc: ServiceException, operation: str) -> ClientError:
        """The botocore error for one of moto's serializable exceptions (SQS raises these)."""
        code, message = str(exc.code), str(exc.message)
        status = 400
        try:
            shape = self.meta.service_model.shape_for_error_code(code)
        except Exception:
            shape = None
        if shape is not None:
            status = int(shape.metadata.get("error", {}).get("httpStatusCode", 400))
        response: dict[str, Any] = {
            "Error": {"Code": code, "Message": message},
            "ResponseMetadata": {"HTTPStatusCode": status},
        }
        return ClientError(response, operation)  # type: ignore[arg-type]


class DirectDynamoDB(_Direct):
    service = "dynamodb"

    def __init__(self, fallback: Any, calls: AwsCalls, throttler: Throttler) -> None:
        super().__init__(fallback, calls, throttler)
        from moto.dynamodb.models import dynamodb_backends

        self._backend = dynamodb_backends[ACCOUNT][REGION]

    def get_item(self, *, TableName: str, Key: Mapping[str, Any], **_: Any) -> dict[str, Any]:
        def run() -> dict[str, Any]:
            item = self._backend.get_item(TableName, dict(Key))
            return {"Item": item.to_json()["Attributes"]} if item else {}

        return self._call("GetItem", run, {"TableName": TableName, "Key": Key, **_})

    def put_item(
        self,
        *,
        TableName: str,
        Item: Mapping[str, Any],
        ConditionExpression: str | None = None,
        ExpressionAttributeNames: Mapping[str, str] | None = None,
        ExpressionAttributeValues: Mapping[str, Any] | None = None,
        **_: Any,
    ) -> dict[str, Any]:
        def run() -> dict[str, Any]:
            self._backend.put_item(
                TableName,
                dict(Item),
                None,
                ConditionExpression,
                dict(ExpressionAttributeNames or {}),
                dict(ExpressionAttributeValues or {}),
                not ConditionExpression,
            )
            return {}

        return self._call("PutItem", run, {"TableName": TableName, "Item": Item})

    def delete_item(
        self,
        *,
        TableName: str,
        Key: Mapping[str, Any],
        ConditionExpression: str | None = None,
        ExpressionAttributeNames: Mapping[str, str] | None = None,
        ExpressionAttributeValues: Mapping[str, Any] | None = None,
        **_: Any,
    ) -> dict[str, Any]:
        def run() -> dict[str, Any]:
            self._backend.delete_item(
                TableName,
                dict(Key),
                dict(ExpressionAttributeNames or {}),
                dict(ExpressionAttributeValues or {}),
                ConditionExpression,
            )
            return {}

        return self._call("DeleteItem", run, {"TableName": TableName, "Key": Key})

    def transact_write_items(self, *, TransactItems: list[dict[str, Any]], **_: Any) -> dict[str, Any]:
        def run() -> dict[str, Any]:
            self._backend.transact_write_items([dict(item) for item in TransactItems])
            return {}

        return self._call("TransactWriteItems", run, {"TransactItems": TransactItems})

    # Other item operations run moto's own DynamoDB action (parameter checks, expression
    # parsing, paging, capacity), handed the parameters as parsed, and skip only the wire.
    def query(self, **params: Any) -> dict[str, Any]:
        return self._action("Query", "query", params)

    def scan(self, **params: Any) -> dict[str, Any]:
        return self._action("Scan", "scan", params)

    def batch_get_item(self, **params: Any) -> dict[str, Any]:
        return self._action("BatchGetItem", "batch_get_item", params)

    def batch_write_item(self, **params: Any) -> dict[str, Any]:
        return self._action("BatchWriteItem", "batch_write_item", params)

    def update_item(self, **params: Any) -> dict[str, Any]:
        return self._action("UpdateItem", "update_item", params)

    def _action(self, operation: str, method: str, params: Mapping[str, Any]) -> dict[str, Any]:
        from moto.dynamodb.responses import DynamoHandler

        def run() -> dict[str, Any]:
            handler = DynamoHandler()
            handler.current_account = ACCOUNT
            handler.region = REGION
            handler.body = dict(params)
            result: dict[str, Any] = getattr(handler, method)().result
            return result

        return self._call(operation, run, params)


class DirectSQS(_Direct):
    service = "sqs"

    def __init__(self, fallback: Any, calls: AwsCalls, throttler: Throttler) -> None:
        super().__init__(fallback, calls, throttler)
        from moto.sqs.models import sqs_backends

        self._backend = sqs_backends[ACCOUNT][REGION]

    def send_message(
        self,
        *,
        QueueUrl: str,
        MessageBody: str,
        DelaySeconds: int = 0,
        MessageAttributes: Mapping[str, Any] | None = None,
        **_: Any,
    ) -> dict[str, Any]:
        def run() -> dict[str, Any]:
            message = self._backend.send_message(
                queue_name=QueueUrl.rsplit("/", 1)[-1],
                message_body=MessageBody,
                message_attributes=dict(MessageAttributes or {}),
                delay_seconds=DelaySeconds,
            )
            return {"MessageId": message.id, "MD5OfMessageBody": message.body_md5}

        return self._call("SendMessage", run, {"QueueUrl": QueueUrl})

    def receive_message(
        self,
        *,
        QueueUrl: str,
        MaxNumberOfMessages: int = 1,
        VisibilityTimeout: int | None = None,
        WaitTimeSeconds: int = 0,
        MessageAttributeNames: list[str] | None = None,
        **_: Any,
    ) -> dict[str, Any]:
        if WaitTimeSeconds:  # a long poll waits outside the lock; leave it to the wire path
            wire: dict[str, Any] = {"MaxNumberOfMessages": MaxNumberOfMessages, **_}
            if VisibilityTimeout is not None:  # botocore rejects None; absent means the queue's
                wire["VisibilityTimeout"] = VisibilityTimeout
            if MessageAttributeNames is not None:
                wire["MessageAttributeNames"] = MessageAttributeNames
            return dict(
                self._fallback.receive_message(QueueUrl=QueueUrl, WaitTimeSeconds=WaitTimeSeconds, **wire)
            )

        def run() -> dict[str, Any]:
            name = QueueUrl.rsplit("/", 1)[-1]
            queue = self._backend.get_queue(name)
            default = queue.visibility_timeout  # type: ignore[attr-defined]
            visibility = default if VisibilityTimeout is None else VisibilityTimeout
            messages = self._backend.receive_message(
                name, MaxNumberOfMessages, 0, int(visibility), list(MessageAttributeNames or [])
            )
            return {"Messages": [_received(m) for m in messages]} if messages else {}

        return self._call("ReceiveMessage", run, {"QueueUrl": QueueUrl})

    def change_message_visibility(
        self, *, QueueUrl: str, ReceiptHandle: str, VisibilityTimeout: int, **_: Any
    ) -> dict[str, Any]:
        def run() -> dict[str, Any]:
            self._backend.change_message_visibility(
                QueueUrl.rsplit("/", 1)[-1], ReceiptHandle, VisibilityTimeout
            )
            return {}

        return self._call("ChangeMessageVisibility", run, {"QueueUrl": QueueUrl})

    def change_message_visibility_batch(
        self, *, QueueUrl: str, Entries: list[dict[str, Any]], **_: Any
    ) -> dict[str, Any]:
        """The executor holds each batch it receives with one of these: moto's backend method,
        shaped as its response layer shapes it (both lists always present)."""

        def run() -> dict[str, Any]:
            done, failed = self._backend.change_message_visibility_batch(QueueUrl.rsplit("/", 1)[-1], Entries)
            return {"Successful": [{"Id": entry_id} for entry_id in done], "Failed": failed}

        return self._call("ChangeMessageVisibilityBatch", run, {"QueueUrl": QueueUrl, "Entries": Entries})

    def get_queue_attributes(
        self, *, QueueUrl: str, AttributeNames: list[str] | None = None, **_: Any
    ) -> dict[str, Any]:
        """The sweeper reads three queues' counts every minute: moto's backend method, shaped as
        its response layer shapes it (every value a string, absent values left out)."""
        names = list(AttributeNames or [])

        def run() -> dict[str, Any]:
            from moto.sqs.exceptions import InvalidAttributeName

            if "" in names:
                raise InvalidAttributeName("")
            attributes = self._backend.get_queue_attributes(QueueUrl.rsplit("/", 1)[-1], names)
            shaped = {key: str(value) for key, value in attributes.items() if value is not None}
            return {"Attributes": shaped} if shaped else {}

        return self._call("GetQueueAttributes", run, {"QueueUrl": QueueUrl})


def _received(message: Any) -> dict[str, Any]:
    """A received message as boto3 shows it: every system attribute, the requested message attributes.

    ``MD5OfMessageAttributes`` is left out (botocore checks it on the wire; nothing reads it after).
    """
    import base64

    out: dict[str, Any] = {
        "MessageId": message.id,
        "ReceiptHandle": message.receipt_handle,
        "MD5OfBody": message.body_md5,
        "Body": message.body,
        "Attributes": {
            "SenderId": str(message.sender_id),
            "SentTimestamp": str(message.sent_timestamp),
            "ApproximateReceiveCount": str(message.approximate_receive_count),
            "ApproximateFirstReceiveTimestamp": str(message.approximate_first_receive_timestamp),
        },
    }
    if message.message_attributes:
        attributes: dict[str, Any] = {}
        for name, value in message.message_attributes.items():
            shaped = {"DataType": value["DataType"]}
            if "StringValue" in value:
                shaped["StringValue"] = value["StringValue"]
            if "BinaryValue" in value:
                raw = value["BinaryValue"]
                shaped["BinaryValue"] = base64.b64decode(raw) if isinstance(raw, str) else raw
            attributes[name] = shaped
        out["MessageAttributes"] = attributes
    return out


class DirectEvents(_Direct):
    service = "events"

    def __init__(self, fallback: Any, calls: AwsCalls, throttler: Throttler) -> None:
        super().__init__(fallback, calls, throttler)
        from moto.events.models import events_backends

        self._backend = events_backends[ACCOUNT][REGION]

    def put_events(self, *, Entries: list[dict[str, Any]], **_: Any) -> dict[str, Any]:
        def run() -> dict[str, Any]:
            entries = self._backend.put_events([dict(e) for e in Entries])
            failed = sum(1 for e in entries if e.get("ErrorCode"))
            return {"FailedEntryCount": failed, "Entries": entries}

        return self._call("PutEvents", run, {"Entries": Entries})


class DirectScheduler(_Direct):
    """Schedule reads and writes (each task apply and each retry makes one or two).

    Calls with a start or end date, a KMS key or a client token take the wire path, so
    timestamp parsing stays botocore's; so does every other operation.
    """

    service = "scheduler"
    _WIRE_ONLY = ("StartDate", "EndDate", "KmsKeyArn", "ClientToken")

    def __init__(self, fallback: Any, calls: AwsCalls, throttler: Throttler) -> None:
        super().__init__(fallback, calls, throttler)
        from moto.scheduler.models import scheduler_backends

        self._backend = scheduler_backends[ACCOUNT][REGION]

    def _write(self, operation: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
        if any(params.get(key) is not None for key in self._WIRE_ONLY):
            return dict(getattr(self._fallback, method)(**params))
        # As on the wire, the backend gets its own copy of every structure.
        copied = json.loads(json.dumps(params))

        def run() -> dict[str, Any]:
            kwargs: dict[str, Any] = {
                "description": copied.get("Description"),
                "end_date": None,
                "flexible_time_window": copied.get("FlexibleTimeWindow"),
                "group_name": copied.get("GroupName"),
                "kms_key_arn": None,
                "name": copied["Name"],
                "schedule_expression": copied.get("ScheduleExpression"),
                "schedule_expression_timezone": copied.get("ScheduleExpressionTimezone"),
                "start_date": None,
                "state": copied.get("State"),
                "target": copied.get("Target"),
            }
            if method == "create_schedule":
                kwargs["action_after_completion"] = copied.get("ActionAfterCompletion")
            schedule = getattr(self._backend, method)(**kwargs)
            return {"ScheduleArn": schedule.arn}

        return self._call(operation, run, params)

    def create_schedule(self, **params: Any) -> dict[str, Any]:
        return self._write("CreateSchedule", "create_schedule", params)

    def update_schedule(self, **params: Any) -> dict[str, Any]:
        return self._write("UpdateSchedule", "update_schedule", params)

    def get_schedule(self, *, Name: str, GroupName: str | None = None, **_: Any) -> dict[str, Any]:
        def run() -> dict[str, Any]:
            shaped: dict[str, Any] = json.loads(
                json.dumps(self._backend.get_schedule(GroupName, Name).to_dict())
            )
            return shaped

        shaped = self._call("GetSchedule", run)
        if shaped.get("StartDate") is not None or shaped.get("EndDate") is not None:
            return dict(self._fallback.get_schedule(Name=Name, GroupName=GroupName))
        out = {key: value for key, value in shaped.items() if value is not None}
        for key in ("CreationDate", "LastModificationDate"):
            if isinstance(out.get(key), int | float):
                out[key] = datetime.fromtimestamp(float(out[key]), tz=UTC)
        return out

    _SUMMARY = ("Arn", "Name", "GroupName", "State", "Target", "CreationDate", "LastModificationDate")
    """What a ``ListSchedules`` entry holds (botocore's ``ScheduleSummary``; moto answers more)."""

    def list_schedules(
        self,
        *,
        GroupName: str | None = None,
        NamePrefix: str | None = None,
        State: str | None = None,
        MaxResults: int | None = None,
        NextToken: str | None = None,
        **_: Any,
    ) -> dict[str, Any]:
        """The health report lists the task schedules every five minutes, and ``tasks apply``
        lists them for its plan: moto's backend method, shaped as botocore parses its answer."""

        def run() -> dict[str, Any]:
            schedules, token = self._backend.list_schedules(
                [GroupName] if GroupName else None,
                State,
                NamePrefix,
                max_results=MaxResults,
                next_token=NextToken,
            )
            summaries = []
            for schedule in schedules:
                raw = schedule.to_dict(short=True)
                summary = {key: raw[key] for key in self._SUMMARY if raw.get(key) is not None}
                for key in ("CreationDate", "LastModificationDate"):
                    if isinstance(summary.get(key), int | float):
                        summary[key] = datetime.fromtimestamp(float(summary[key]), tz=UTC)
                summaries.append(summary)
            answer: dict[str, Any] = {"Schedules": summaries}
            if token is not None:
                answer["NextToken"] = token
            return answer

        return self._call("ListSchedules", run)

    def delete_schedule(self, *, Name: str, GroupName: str | None = None, **_: Any) -> dict[str, Any]:
        def run() -> dict[str, Any]:
            self._backend.delete_schedule(GroupName, Name)
            return {}

        return self._call("DeleteSchedule", run)


DIRECT: dict[str, type[_Direct]] = {
    "dynamodb": DirectDynamoDB,
    "sqs": DirectSQS,
    "events": DirectEvents,
    "scheduler": DirectScheduler,
}


class DirectSession:
    """Looks like a boto3 session to ``build_deps``: hot-path services direct, the rest in-process
    (``dynamodbstreams`` among them).

    ``gate`` runs before every direct call, as its ``before-call`` hook does for the in-process
    clients of ``inner``."""

    def __init__(
        self,
        inner: Any,
        calls: AwsCalls,
        throttler: Throttler,
        gate: CallGate | None = None,
        meter: Meter | None = None,
    ) -> None:
        self._inner = inner
        self._calls = calls
        self._throttler = throttler
        self._gate = gate
        self._meter = meter
        self.events = inner.events

    def client(self, service: str, **kwargs: Any) -> Any:
        fallback = self._inner.client(service, **kwargs)
        direct = DIRECT.get(service)
        if direct is None:
            return fallback
        client = direct(fallback, self._calls, self._throttler)
        client.gate = self._gate
        client.meter = self._meter
        return client

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)
