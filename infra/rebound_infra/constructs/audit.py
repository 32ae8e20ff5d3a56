"""The audit trail's own guards: the audit table's resource policy, and the read-only auditor.

- **The resource policy** (always) denies to every principal (``*``: the stack's roles, operators,
  administrators, other accounts) every action that changes or removes an existing audit item:
  ``AUDIT_SEALED``. It sits on the table, so an identity policy cannot lift it; only changing the
  table's resource policy can (``dynamodb:PutResourcePolicy`` / ``DeleteResourcePolicy``, which
  CloudTrail records). With ``retain_data`` it also denies ``DeleteTable``: the table is retained
  and protected from deletion already, and removing it now takes a policy change first. Without
  ``retain_data`` the stack's deletion removes the table, so ``DeleteTable`` stays possible.
- **The auditor role** (only when ``audit.auditor_principals`` names who may assume it): reads
  what ``rebound audit verify`` reads and may call ``kms:VerifyMac`` on the audit key, nothing
  else; never ``GenerateMac``, never a write (``docs/security.md``, *Verifying without
  GenerateMac*).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from aws_cdk import Duration
from aws_cdk import aws_dynamodb as ddb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from rebound import resources as r
from rebound_infra.nag import acknowledge, resource_finding
from rebound_infra.permissions import AUDIT_REWRITES

AUDIT_SEALED = AUDIT_REWRITES
"""Denied on the audit table to every principal by its resource policy: the single and batch
updates and deletes, and PartiQL's (a transaction's items are authorized as ``UpdateItem``/
``DeleteItem`` each, so they are covered too). ``PutItem`` cannot be denied (it is how records are
added) and no condition key can require its ``attribute_not_exists`` condition: that is the keyed
chain's job."""
TTL_SEALED = ("dynamodb:UpdateTimeToLive",)
"""Denied too, except to CloudFormation deploying the stack (``aws:CalledVia``), which sets the
table's TTL on ``ttl`` (``rebound.domain.retention``): anyone else turning TTL on with a number
attribute such as ``seq`` would have DynamoDB itself delete every record. TTL's own deletions are
the service's, not a principal's, and every record it deletes was archived when it was written."""
RETAINED_SEALED = ("dynamodb:DeleteTable",)
"""Also denied when the environment retains its data (``retain_data``)."""

AUDITOR_READS: Mapping[str, tuple[str, ...]] = {
    r.AUDIT.logical: ("dynamodb:Query", "dynamodb:Scan"),
    r.RUNS.logical: ("dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:Scan"),
}
"""What ``rebound audit verify`` reads (``rebound.ops.audit``): a subject's chain (Query), every
chain (parallel Scan segments), and the runs its trail must rebuild (GetItem, BatchGetItem; with
``--all``, parallel Scan segments of the runs table).
``tests/e2e/test_cli_operations.py::test_an_auditor_verifies_with_verify_mac_and_reads_only``
runs the command with exactly these calls (and ``ssm:GetParameter``, ``kms:VerifyMac``) allowed."""
AUDITOR_KEY_ACTIONS = ("kms:VerifyMac",)
AUDITOR_DATA_KEY_ACTIONS = ("kms:Decrypt", "kms:DescribeKey")
"""With ``encryption: cmk``, reading the tables needs the data key, through DynamoDB only."""


def seal_audit_table(table: ddb.Table, *, retain: bool) -> None:
    """The audit table's resource policy: ``AUDIT_SEALED`` denied to every principal."""
    table.add_to_resource_policy(
        iam.PolicyStatement(
            sid="AuditRecordsAreNeverChanged",
            effect=iam.Effect.DENY,
            principals=[iam.AnyPrincipal()],
            actions=[*AUDIT_SEALED, *(RETAINED_SEALED if retain else ())],
            # In a table's own policy "*" is that table (and its indexes); naming its ARN would be
            # a circular reference in CloudFormation.
            resources=["*"],
        )
    )
    table.add_to_resource_policy(
        iam.PolicyStatement(
            sid="AuditExpiryIsSetByTheStackOnly",
            effect=iam.Effect.DENY,
            principals=[iam.AnyPrincipal()],
            actions=list(TTL_SEALED),
            resources=["*"],
            conditions={"ForAllValues:StringNotEquals": {"aws:CalledVia": ["cloudformation.amazonaws.com"]}},
        )
    )


class Auditor(Construct):
    """The read-only auditor role, assumable by ``principals`` (IAM role, user or account ARNs)."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        environment: str,
        principals: Sequence[str],
        tables: Mapping[str, ddb.ITable],
        resources_parameter: ssm.IStringParameter,
        archive: s3.IBucket | None = None,
    ) -> None:
        super().__init__(scope, id)
        self.role = iam.Role(
            self,
            "Role",
            description=f"Rebound ({environment}): audit verification only (reads, KMS VerifyMac)",
            assumed_by=iam.CompositePrincipal(*(iam.ArnPrincipal(arn) for arn in principals)),
            max_session_duration=Duration.hours(1),
        )
        for logical, actions in AUDITOR_READS.items():
            self.role.add_to_policy(
                iam.PolicyStatement(actions=list(actions), resources=[tables[logical].table_arn])
            )
        self.role.add_to_policy(
            iam.PolicyStatement(actions=["ssm:GetParameter"], resources=[resources_parameter.parameter_arn])
        )
        if archive is not None:  # `rebound audit verify --archive`: the records that expired
            self.role.add_to_policy(
                iam.PolicyStatement(actions=["s3:ListBucket"], resources=[archive.bucket_arn])
            )
            self.role.add_to_policy(
                iam.PolicyStatement(actions=["s3:GetObject"], resources=[archive.arn_for_objects("audit/*")])
            )
            if archive.encryption_key is not None:
                archive.encryption_key.grant_decrypt(self.role)
            acknowledge(
                self.role,
                resource_finding(self.role, "AwsSolutions-IAM5", f"{archive.bucket_arn}/audit/*"),
                "The auditor reads the archived audit records: GetObject under audit/ of the archive "
                "bucket, whose objects are named at run time (a day and stream sequence numbers).",
            )
