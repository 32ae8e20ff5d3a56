"""Every DynamoDB table in ``SPEC.tables``: keys, indexes, TTL and streams from the spec;
on-demand or provisioned with auto scaling (the environment's ``capacity``), encrypted (the AWS
managed key, or the environment's customer-managed key), point-in-time recovery on."""

from __future__ import annotations

from aws_cdk import RemovalPolicy
from aws_cdk import aws_dynamodb as ddb
from aws_cdk import aws_kms as kms
from constructs import Construct

from rebound import resources as r
from rebound_infra.config import CapacityConfig

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
        capacity: CapacityConfig | None = None,
        keep_indexes: tuple[str, ...] = (),
    ) -> None:
        super().__init__(scope, id)
        self.keep_indexes = keep_indexes
        """Retired indexes built beside their replacements (``upgrade.keep_indexes``)."""
        self.capacity = capacity or CapacityConfig()
        provisioned = self.capacity.mode == "provisioned"
        self.tables: dict[str, ddb.Table] = {}
        for spec in r.SPEC.tables:
            units = self.capacity.units(spec.logical)
            read_units = units.min_read_units if provisioned else None
            write_units = units.min_write_units if provisioned else None
            table = ddb.Table(
                self,
                spec.construct_id,
                partition_key=_attr(spec.partition),
                sort_key=_attr(spec.sort) if spec.sort else None,
                billing_mode=ddb.BillingMode.PROVISIONED if provisioned else ddb.BillingMode.PAY_PER_REQUEST,
                read_capacity=read_units,
                write_capacity=write_units,
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
            for index in spec.built_indexes(keep_indexes):
                table.add_global_secondary_index(
                    index_name=index.name,
                    partition_key=_attr(index.partition),
                    sort_key=_attr(index.sort) if index.sort else None,
                    projection_type=ddb.ProjectionType[index.projection],
                    read_capacity=read_units,
                    write_capacity=write_units,
                )
            if provisioned:
                self._scale(table, spec)
            self.tables[spec.logical] = table

    def _scale(self, table: ddb.Table, spec: r.TableSpec) -> None:
        """Auto scaling of a provisioned table and each of its indexes: reads and writes each kept
        near the target utilization, between the table's units (``capacity.units``)."""
        c = self.capacity.units(spec.logical)
        reads = {"min_capacity": c.min_read_units, "max_capacity": c.max_read_units}
        writes = {"min_capacity": c.min_write_units, "max_capacity": c.max_write_units}
        scaled = [table.auto_scale_read_capacity(**reads), table.auto_scale_write_capacity(**writes)]
        for index in spec.built_indexes(self.keep_indexes):
            scaled.append(table.auto_scale_global_secondary_index_read_capacity(index.name, **reads))
            scaled.append(table.auto_scale_global_secondary_index_write_capacity(index.name, **writes))
        for attribute in scaled:
            attribute.scale_on_utilization(
                target_utilization_percent=self.capacity.target_utilization_percent
            )

    def table(self, logical: str) -> ddb.Table:
        return self.tables[logical]
