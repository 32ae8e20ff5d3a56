"""The stack's KMS keys, each with a key policy that names exactly who may use it.

- **The audit key** (always): an HMAC key (``HMAC_256``, ``GENERATE_VERIFY_MAC``) that keys the
  audit chain (``rebound.adapters.audit_keys``). Only the roles that write audit records may call
  ``GenerateMac`` (the functions with the audit table in their access, and the operator roles of
  ``audit.writer_roles``), which get ``VerifyMac`` with it. The auditor role (``audit.
  auditor_principals``) gets ``VerifyMac`` alone. KMS does not rotate HMAC keys: rotating is a
  new key (``docs/security.md``).
- **The data key** (``encryption: cmk``): one symmetric customer-managed key, rotation on, for the
  tables, queues, log groups and the alerts topic. The functions' roles and the scheduler's role
  may use it only through DynamoDB, SQS and SNS (``kms:ViaService``); CloudWatch Logs only for this
  account's log groups, CloudWatch alarms only for this account, and EventBridge (for the rules'
  target queues: CDK's statement, which each ``SqsQueue`` target adds).

In both, the account root keeps the administrative actions (so the key can be managed and its
policy changed) but none that encrypts, decrypts or makes a MAC.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aws_cdk import ArnFormat, RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct

ADMIN_ACTIONS = (
    "kms:Create*",
    "kms:Describe*",
    "kms:Enable*",
    "kms:List*",
    "kms:Put*",
    "kms:Update*",
    "kms:Revoke*",
    "kms:Disable*",
    "kms:Get*",
    "kms:Delete*",
    "kms:TagResource",
    "kms:UntagResource",
    "kms:ScheduleKeyDeletion",
    "kms:CancelKeyDeletion",
)
"""Managing a key, without using it: no Encrypt, Decrypt, GenerateDataKey, GenerateMac, VerifyMac."""
MAC_ACTIONS = ("kms:GenerateMac", "kms:VerifyMac")
VERIFY_ACTIONS = ("kms:VerifyMac",)
DATA_ACTIONS = ("kms:Encrypt", "kms:Decrypt", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:DescribeKey")
READ_ACTIONS = ("kms:Decrypt", "kms:DescribeKey")
DATA_SERVICES = ("dynamodb", "sqs", "sns")
"""The services the roles may use the data key through."""


def _allow(
    key: kms.Key,
    sid: str,
    principals: Sequence[iam.IPrincipal],
    actions: Sequence[str],
    conditions: dict[str, Any] | None = None,
) -> None:
    """A key policy statement (in a key policy, the resource "*" is the key itself)."""
    key.add_to_resource_policy(
        iam.PolicyStatement(
            sid=sid,
            principals=list(principals),
            actions=list(actions),
            resources=["*"],
            conditions=conditions,
        )
    )


def _policy() -> iam.PolicyDocument:
    return iam.PolicyDocument(
        statements=[
            iam.PolicyStatement(
                sid="KeyAdministration",
                principals=[iam.AccountRootPrincipal()],
                actions=list(ADMIN_ACTIONS),
                resources=["*"],  # in a key policy, "*" is this key
            )
        ]
    )


class AuditKey(Construct):
    """The HMAC key of the audit chain; ``allow_writers`` adds the roles that may sign."""

    def __init__(self, scope: Construct, id: str, *, retain: bool) -> None:
        super().__init__(scope, id)
        self.key = kms.Key(
            self,
            "Key",
            description="Rebound audit chain: the MACs of audit records (GenerateMac by writers only)",
            key_spec=kms.KeySpec.HMAC_256,
            key_usage=kms.KeyUsage.GENERATE_VERIFY_MAC,
            policy=_policy(),
            removal_policy=RemovalPolicy.RETAIN if retain else RemovalPolicy.DESTROY,
        )

    def allow_writers(self, principals: Sequence[iam.IPrincipal]) -> None:
        if principals:
            _allow(self.key, "AuditWriters", principals, MAC_ACTIONS)

    def allow_verifiers(self, principals: Sequence[iam.IPrincipal]) -> None:
        """Principals that may check MACs (``VerifyMac``) but never make one."""
        if principals:
            _allow(self.key, "AuditVerifiers", principals, VERIFY_ACTIONS)


class DataKey(Construct):
    """The one customer-managed key of ``encryption: cmk``; ``allow_roles`` adds its users."""

    def __init__(self, scope: Construct, id: str, *, retain: bool) -> None:
        super().__init__(scope, id)
        stack = Stack.of(self)
        self.key = kms.Key(
            self,
            "Key",
            description="Rebound data: tables, queues, log groups and the alerts topic",
            enable_key_rotation=True,
            policy=_policy(),
            removal_policy=RemovalPolicy.RETAIN if retain else RemovalPolicy.DESTROY,
        )
        log_groups = stack.format_arn(
            service="logs", resource="log-group", resource_name="*", arn_format=ArnFormat.COLON_RESOURCE_NAME
        )
        _allow(
            self.key,
            "CloudWatchLogs",
            [iam.ServicePrincipal(f"logs.{stack.region}.amazonaws.com")],
            ["kms:Encrypt*", "kms:Decrypt*", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:Describe*"],
            {"ArnLike": {"kms:EncryptionContext:aws:logs:arn": log_groups}},
        )
        # Alarms publish to the alerts topic. (EventBridge's statement for the rules' target
        # queues is CDK's own, added by each SqsQueue target; the queues' OnlyThisBusRules deny
        # keeps what EventBridge may send to this bus's rules.)
        _allow(
            self.key,
            "CloudWatchAlarmsPublish",
            [iam.ServicePrincipal("cloudwatch.amazonaws.com")],
            ["kms:Decrypt", "kms:GenerateDataKey*"],
            {"StringEquals": {"aws:SourceAccount": stack.account}},
        )

    def allow_readers(self, roles: Sequence[iam.IPrincipal]) -> None:
        """Roles that only read tables: ``Decrypt`` and ``DescribeKey``, through DynamoDB only."""
        if roles:
            region = Stack.of(self).region
            _allow(
                self.key,
                "ReadersThroughDynamoDB",
                roles,
                READ_ACTIONS,
                {"StringEquals": {"kms:ViaService": f"dynamodb.{region}.amazonaws.com"}},
            )

    def allow_roles(self, roles: Sequence[iam.IPrincipal]) -> None:
        region = Stack.of(self).region
        services = [f"{service}.{region}.amazonaws.com" for service in DATA_SERVICES]
        _allow(
            self.key,
            "RolesThroughServices",
            roles,
            DATA_ACTIONS,
            {"StringEquals": {"kms:ViaService": services}},
        )
