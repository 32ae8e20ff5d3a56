"""SQS: the execution (delay) queue and its dead-letter queue."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from rebound.adapters.errors import translate
from rebound.domain.jsonutil import dumps
from rebound.engine.ports import PeekedMessage, QueueCounts, SentMessage
from rebound.engine.ports.transport import attribute_text

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_sqs.type_defs import MessageAttributeValueTypeDef

    from rebound.adapters.queue_batches import SqsBatches

MAX_DELAY_S = 900


def message_attributes(values: Mapping[str, Any]) -> dict[str, MessageAttributeValueTypeDef]:
    """SQS message attributes; their text is what the DLQ's record keeps (``attribute_text``)."""
    out: dict[str, MessageAttributeValueTypeDef] = {}
    for name, value in values.items():
        text = attribute_text(value)
        if text is None:
            continue
        kind = "Number" if isinstance(value, int | float) and not isinstance(value, bool) else "String"
        out[name] = {"DataType": kind, "StringValue": text}
    return out


def read_attributes(raw: Mapping[str, Any]) -> dict[str, str]:
    """Message attributes as plain strings, from either the SQS API or a Lambda event record."""
    out: dict[str, str] = {}
    for name, value in raw.items():
        text = value.get("StringValue", value.get("stringValue"))
        if text is not None:
            out[name] = str(text)
    return out


def read_counts(client: SQSClient, url: str, queue: str) -> QueueCounts:
    try:
        attrs = client.get_queue_attributes(
            QueueUrl=url,
            AttributeNames=[
                "ApproximateNumberOfMessages",
                "ApproximateNumberOfMessagesNotVisible",
                "ApproximateNumberOfMessagesDelayed",
            ],
        )["Attributes"]
    except (ClientError, BotoCoreError) as exc:
        raise translate(exc, f"read the counts of the {queue} queue") from exc
    return QueueCounts(
        int(attrs.get("ApproximateNumberOfMessages", 0)),
        int(attrs.get("ApproximateNumberOfMessagesNotVisible", 0)),
        int(attrs.get("ApproximateNumberOfMessagesDelayed", 0)),
    )


class SqsQueues:
    def __init__(self, client: SQSClient, urls: Mapping[str, str]) -> None:
        self.client = client
        self.urls = dict(urls)

    def send(
        self,
        queue: str,
        body: Mapping[str, Any] | str,
        *,
        delay_s: float = 0,
        attributes: Mapping[str, Any] | None = None,
        trace: str | None = None,
    ) -> SentMessage:
        delay = min(max(math.ceil(delay_s), 0), MAX_DELAY_S)
        text = body if isinstance(body, str) else dumps(body)
        extra: dict[str, Any] = {}
        if trace:
            extra["MessageSystemAttributes"] = {
                "AWSTraceHeader": {"DataType": "String", "StringValue": trace}
            }
        try:
            resp = self.client.send_message(
                QueueUrl=self.urls[queue],
                MessageBody=text,
                DelaySeconds=delay,
                MessageAttributes=message_attributes(attributes or {}),
                **extra,
            )
        except (ClientError, BotoCoreError) as exc:
            raise translate(exc, f"send to the {queue} queue") from exc
        return SentMessage(resp["MessageId"], delay)

    def release(self, queue: str, receipt_handle: str) -> None:
        """Make an in-flight message visible again now, so another invocation can take it."""
        try:
            self.client.change_message_visibility(
                QueueUrl=self.urls[queue], ReceiptHandle=receipt_handle, VisibilityTimeout=0
            )
        except (ClientError, BotoCoreError) as exc:
            raise translate(exc, f"release a message on the {queue} queue") from exc

    def peek(self, queue: str, max_messages: int, visibility_s: int = 30) -> list[PeekedMessage]:
        """Read up to ``max_messages`` without deleting them; they reappear after ``visibility_s``."""
        out: list[PeekedMessage] = []
        while len(out) < max_messages:
            try:
                resp = self.client.receive_message(
                    QueueUrl=self.urls[queue],
                    MaxNumberOfMessages=min(10, max_messages - len(out)),
                    VisibilityTimeout=visibility_s,
                    WaitTimeSeconds=0,
                    MessageAttributeNames=["All"],
                    MessageSystemAttributeNames=["All"],
                )
            except (ClientError, BotoCoreError) as exc:
                raise translate(exc, f"read the {queue} queue") from exc
            batch = resp.get("Messages", [])
            if not batch:
                break
            for msg in batch:
                system = msg.get("Attributes", {})
                out.append(
                    PeekedMessage(
                        message_id=msg["MessageId"],
                        body=msg.get("Body", ""),
                        receipt_handle=msg["ReceiptHandle"],
                        receive_count=int(system.get("ApproximateReceiveCount", "1")),
                        sent_at_ms=int(system.get("SentTimestamp", "0")),
                        attributes=read_attributes(msg.get("MessageAttributes", {})),
                    )
                )
        return out

    def counts(self, queue: str) -> QueueCounts:
        return read_counts(self.client, self.urls[queue], queue)

    def change_visibility(self, queue: str, receipt_handle: str, seconds: float) -> None:
        """Make an in-flight message visible again after ``seconds`` (0: now)."""
        try:
            self.client.change_message_visibility(
                QueueUrl=self.urls[queue],
                ReceiptHandle=receipt_handle,
                VisibilityTimeout=min(max(math.ceil(seconds), 0), 43_200),
            )
        except (ClientError, BotoCoreError) as exc:
            raise translate(exc, f"change a message's visibility on the {queue} queue") from exc

    def delete(self, queue: str, receipt_handle: str) -> None:
        try:
            self.client.delete_message(QueueUrl=self.urls[queue], ReceiptHandle=receipt_handle)
        except (ClientError, BotoCoreError) as exc:
            raise translate(exc, f"delete a message from the {queue} queue") from exc

    def depth(self, queue: str) -> int:
        """Messages in the queue, visible or in flight (approximate, as SQS counts)."""
        try:
            attrs = self.client.get_queue_attributes(
                QueueUrl=self.urls[queue],
                AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
            )["Attributes"]
        except (ClientError, BotoCoreError) as exc:
            raise translate(exc, f"read the {queue} queue's depth") from exc
        return int(attrs.get("ApproximateNumberOfMessages", 0)) + int(
            attrs.get("ApproximateNumberOfMessagesNotVisible", 0)
        )

    def batches(self) -> SqsBatches:
        """The same queues in batches of ten (a new request counter each call)."""
        from rebound.adapters.queue_batches import SqsBatches

        return SqsBatches(self.client, self.urls)


class CloudWatchQueueAges:
    """``ApproximateAgeOfOldestMessage`` of each queue from CloudWatch (AWS/SQS, one-minute
    datapoints over the last ten minutes, the latest maximum). SQS publishes it every minute for
    active queues, so it trails by up to a few minutes; a queue without datapoints says ``None``."""

    source = "cloudwatch"

    def __init__(
        self, client: Callable[[], Any], names: Mapping[str, str], now: Callable[[], datetime]
    ) -> None:
        self._make = client
        self._client: Any = None
        self.names = names
        self.now = now

    def client(self) -> Any:
        if self._client is None:
            self._client = self._make()
        return self._client

    def oldest_age_s(self, queue: str) -> float | None:
        end = self.now()
        try:
            resp = self.client().get_metric_statistics(
                Namespace="AWS/SQS",
                MetricName="ApproximateAgeOfOldestMessage",
                Dimensions=[{"Name": "QueueName", "Value": self.names[queue]}],
                StartTime=end - timedelta(minutes=10),
                EndTime=end,
                Period=60,
                Statistics=["Maximum"],
            )
        except (ClientError, BotoCoreError) as exc:
            raise translate(exc, f"read the {queue} queue's oldest-message age") from exc
        points = sorted(resp.get("Datapoints", []), key=lambda p: p["Timestamp"])
        return float(points[-1]["Maximum"]) if points else None


def queue_name(url: str) -> str:
    """A queue's name, the last part of its URL."""
    return url.rstrip("/").rsplit("/", 1)[-1]
