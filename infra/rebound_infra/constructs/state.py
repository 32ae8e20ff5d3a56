"""Every DynamoDB table in ``SPEC.tables``: keys, indexes, TTL and streams from the spec;
on-demand, encrypted (the AWS managed key, or the environment's customer-managed key), point-in-time
recovery on."""

from __future__ import annotations

from aws_cdk import RemovalPolicy
from aws_cdk import aws_dynamodb as ddb
from aws_cdk import aws_kms as kms
from constructs import Construct

from rebound import resources as r

_TYPES = {"S": ddb.AttributeType.STRING, "N": ddb.AttributeType.NUMBER}
_STREAMS = {
    "NEW_IMAGE": ddb.StreamViewType.NEW_IMAGE,
    "NEW_AND_OLD_IMAGES": ddb.StreamViewType.NEW_AND_OLD_IMAGES,
}


def _attr(key: r.Key) -> ddb.Attribute:
    return ddb.Attribute(name=key.name, type=_TYPES[key.type])


class State(Construct):
    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        retain: bool,
        deletion_protection: bool,
        key: kms.IKey | None = None,
    ) -> None:
        super().__init__(scope, id)
        self.tables: dict[str, ddb.Table] = {}
        for spec in r.SPEC.tables:
            table = ddb.Table(
                self,
                spec.construct_id,
                partition_key=_attr(spec.partition),
                sort_key=_attr(spec.sort) if spec.sort else None,
                billing_mode=ddb.BillingMode.PAY_PER_REQUEST,
                encryption=ddb.TableEncryption.CUSTOMER_MANAGED if key else ddb.TableEncryption.AWS_MANAGED,
                encryption_key=key,
                point_in_time_recovery_specification=ddb.PointInTimeRecoverySpecification(
                    point_in_time_recovery_enabled=True
                ),
                time_to_live_attribute=spec.ttl_attribute,
                stream=_STREAMS[spec.stream] if spec.stream else None,
                deletion_protection=deletion_protection,
                removal_policy=RemovalPolicy.RETAIN if retain else RemovalPolicy.DESTROY,
            )
            for index in spec.indexes:
                table.add_global_secondary_index(
                    index_name=index.name,
                    partition_key=_attr(index.partition),
                    sort_key=_attr(index.sort) if index.sort else None,
                    projection_type=ddb.ProjectionType.ALL,
                )
            self.tables[spec.logical] = table

    def table(self, logical: str) -> ddb.Table:
        return self.tables[logical]
