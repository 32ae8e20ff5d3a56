"""SQS in batches of ten, for operators: receive with receipt handles, send, delete, release, depth.

The engine's ``Queues`` adapter sends one message per request, which is right for it. Moving a
dead-letter queue needs the batch APIs so that a thousand messages cost about three hundred
requests: ``ReceiveMessage`` (10), ``SendMessageBatch`` (10), ``DeleteMessageBatch`` (10).
Every AWS error becomes a Rebound error through ``rebound.adapters.errors.translate``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from rebound.adapters.errors import translate
from rebound.adapters.queues import message_attributes, read_attributes, read_counts
from rebound.engine.ports import BATCH, BatchResult, Outgoing, QueueCounts, Received

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient


class SqsBatches:
    """The ``QueueBatches`` port on SQS."""

    def __init__(self, client: SQSClient, urls: Mapping[str, str]) -> None:
        self.client = client
        self.urls = dict(urls)
        self.requests = 0
        """SQS requests made so far (each batch call counts once, whatever botocore retried)."""

    def receive(self, queue: str, *, visibility_s: int, wait_s: int = 0) -> list[Received]:
        """One ``ReceiveMessage`` of up to ten messages, hidden from others for ``visibility_s``."""
        self.requests += 1
        try:
            resp = self.client.receive_message(
                QueueUrl=self.urls[queue],
                MaxNumberOfMessages=BATCH,
                VisibilityTimeout=visibility_s,
                WaitTimeSeconds=wait_s,
                MessageAttributeNames=["All"],
                MessageSystemAttributeNames=["All"],
            )
        except (ClientError, BotoCoreError) as exc:
            raise translate(exc, f"read the {queue} queue") from exc
        out: list[Received] = []
        for msg in resp.get("Messages", []):
            system = msg.get("Attributes", {})
            out.append(
                Received(
                    message_id=msg["MessageId"],
                    receipt_handle=msg["ReceiptHandle"],
                    body=msg.get("Body", ""),
                    attributes=read_attributes(msg.get("MessageAttributes", {})),
                    sent_at_ms=int(system.get("SentTimestamp", "0")),
                    receive_count=int(system.get("ApproximateReceiveCount", "1")),
                )
            )
        return out

    def send(self, queue: str, messages: Sequence[Outgoing]) -> BatchResult:
        """One ``SendMessageBatch`` of at most ten messages."""
        entries: list[Any] = [
            {
                "Id": str(index),
                "MessageBody": message.body,
                "MessageAttributes": message_attributes(message.attributes),
            }
            for index, message in enumerate(messages)
        ]
        return self._batch(queue, "send to", "send_message_batch", entries, [m.key for m in messages])

    def delete(self, queue: str, messages: Sequence[tuple[str, str]]) -> BatchResult:
        """One ``DeleteMessageBatch`` of at most ten ``(key, receipt handle)`` pairs."""
        entries: list[Any] = [
            {"Id": str(index), "ReceiptHandle": handle} for index, (_, handle) in enumerate(messages)
        ]
        return self._batch(queue, "delete from", "delete_message_batch", entries, [k for k, _ in messages])

    def set_visibility(self, queue: str, messages: Sequence[tuple[str, str]], seconds: int) -> BatchResult:
        """One ``ChangeMessageVisibilityBatch``: ``seconds=0`` makes the messages visible again now."""
        entries: list[Any] = [
            {"Id": str(index), "ReceiptHandle": handle, "VisibilityTimeout": seconds}
            for index, (_, handle) in enumerate(messages)
        ]
        return self._batch(
            queue,
            "change the visibility of messages on",
            "change_message_visibility_batch",
            entries,
            [k for k, _ in messages],
        )

    def _batch(self, queue: str, doing: str, method: str, entries: list[Any], keys: list[str]) -> BatchResult:
        result = BatchResult()
        if not entries:
            return result
        if len(entries) > BATCH:
            raise ValueError(f"at most {BATCH} entries per batch, got {len(entries)}")
        self.requests += 1
        try:
            resp = getattr(self.client, method)(QueueUrl=self.urls[queue], Entries=entries)
        except (ClientError, BotoCoreError) as exc:
            raise translate(exc, f"{doing} the {queue} queue") from exc
        for entry in resp.get("Successful", []):
            result.ok.append(keys[int(entry["Id"])])
        for entry in resp.get("Failed", []):
            result.failed[keys[int(entry["Id"])]] = f"{entry.get('Code', '?')}: {entry.get('Message', '')}"
        return result

    def depth(self, queue: str) -> QueueCounts:
        self.requests += 1
        return read_counts(self.client, self.urls[queue], queue)
