"""Every SQS queue in ``SPEC.queues``: SSE (SQS-managed, or the environment's customer-managed key),
TLS-only, and the redrive policy its spec names."""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from rebound import resources as r


class Messaging(Construct):
    def __init__(self, scope: Construct, id: str, *, retain: bool, key: kms.IKey | None = None) -> None:
        super().__init__(scope, id)
        self.queues: dict[str, sqs.Queue] = {}
        # Dead-letter queues first: a queue's redrive policy needs its DLQ.
        for spec in sorted(r.SPEC.queues, key=lambda q: q.dead_letter is not None):
            dead_letter = None
            if spec.dead_letter is not None:
                if spec.max_receive_count is None:
                    raise ValueError(f"queue {spec.logical}: a dead letter queue needs max_receive_count")
                dead_letter = sqs.DeadLetterQueue(
                    queue=self.queues[spec.dead_letter], max_receive_count=spec.max_receive_count
                )
            self.queues[spec.logical] = sqs.Queue(
                self,
                spec.logical,
                encryption=sqs.QueueEncryption.KMS if key else sqs.QueueEncryption.SQS_MANAGED,
                encryption_master_key=key,
                data_key_reuse=Duration.hours(1) if key else None,
                enforce_ssl=True,
                visibility_timeout=Duration.seconds(spec.visibility_timeout_s),
                retention_period=Duration.seconds(spec.retention_s),
                receive_message_wait_time=Duration.seconds(spec.receive_wait_s),
                dead_letter_queue=dead_letter,
                removal_policy=RemovalPolicy.RETAIN if retain else RemovalPolicy.DESTROY,
            )

    def queue(self, logical: str) -> sqs.Queue:
        return self.queues[logical]
