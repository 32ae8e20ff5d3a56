"""The audit archive: the S3 bucket audit records are copied to as they are written, which keeps
them after DynamoDB's TTL deletes them (docs/archive.md).

Versioned, encrypted (S3-managed keys, or the environment's key with ``encryption: cmk``), blocked
from public access, TLS only, and retained when the stack is deleted: an archive outlives what it
archives. With ``retention.object_lock_days`` it has S3 Object Lock in compliance mode: no one, the
account's root user included, deletes or overwrites an object version before that many days.
Objects of 128 KB or more (Glacier Instant Retrieval bills smaller ones as 128 KB) move to Glacier
Instant Retrieval after 30 days: read in milliseconds, at a sixth of the storage price. Versions
replaced by a batch archived again expire after 30 days (an object under a lock keeps them longer).
"""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from rebound_infra.nag import acknowledge

COLD_AFTER_DAYS = 30
COLD_FROM_BYTES = 128 * 1024


class AuditArchive(Construct):
    def __init__(
        self, scope: Construct, id: str, *, key: kms.IKey | None, object_lock_days: int | None
    ) -> None:
        super().__init__(scope, id)
        self.key = key
        self.bucket = s3.Bucket(
            self,
            "Bucket",
            versioned=True,
            encryption=s3.BucketEncryption.KMS if key is not None else s3.BucketEncryption.S3_MANAGED,
            encryption_key=key,
            bucket_key_enabled=key is not None,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            object_lock_enabled=object_lock_days is not None,
            object_lock_default_retention=(
                s3.ObjectLockRetention.compliance(Duration.days(object_lock_days))
                if object_lock_days is not None
                else None
            ),
            lifecycle_rules=[
                s3.LifecycleRule(
                    id="cold-after-30-days",
                    object_size_greater_than=COLD_FROM_BYTES,
                    transitions=[
                        s3.Transition(
                            storage_class=s3.StorageClass.GLACIER_INSTANT_RETRIEVAL,
                            transition_after=Duration.days(COLD_AFTER_DAYS),
                        )
                    ],
                ),
                s3.LifecycleRule(
                    id="replaced-versions", noncurrent_version_expiration=Duration.days(COLD_AFTER_DAYS)
                ),
            ],
            removal_policy=RemovalPolicy.RETAIN,
        )
        acknowledge(
            self.bucket,
            "AwsSolutions-S1",
            "Only the archiver and the sweeper write here, and operators read; CloudTrail data events "
            "are the access log where an environment needs one (server access logs would need a "
            "second bucket per environment).",
        )

    def grant_write(self, role: iam.IGrantable) -> None:
        """``PutObject`` under ``audit/`` and nothing else (a batch is one new object)."""
        iam.Grant.add_to_principal(
            grantee=role, actions=["s3:PutObject"], resource_arns=[self.bucket.arn_for_objects("audit/*")]
        )
        if self.key is not None:
            self.key.grant(role, "kms:GenerateDataKey")
