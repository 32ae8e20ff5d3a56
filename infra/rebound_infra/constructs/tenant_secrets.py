"""The role through which the executor reads a task's secrets: one tenant at a time.

The executor assumes it with the session tag ``rebound:tenant=<the task's tenant>``
(``rebound.adapters.secrets.TenantSecrets``); its policy allows reads only under
``/rebound/<env>/tenants/${aws:PrincipalTag/rebound:tenant}/`` (SSM parameters) and
``rebound/<env>/tenants/${aws:PrincipalTag/rebound:tenant}/`` (Secrets Manager), so IAM refuses a
reference outside the task's tenant even if the executor's own check did not.
"""

from __future__ import annotations

from aws_cdk import Stack
from aws_cdk import aws_iam as iam
from constructs import Construct

from rebound.adapters.secrets import TENANT_TAG
from rebound_infra.nag import acknowledge, resource_finding

PRINCIPAL_TENANT = f"${{aws:PrincipalTag/{TENANT_TAG}}}"


def tenant_parameter_arn(scope: Construct, environment: str) -> str:
    return Stack.of(scope).format_arn(
        service="ssm",
        resource="parameter",
        resource_name=f"rebound/{environment}/tenants/{PRINCIPAL_TENANT}/*",
    )


def tenant_secret_arn(scope: Construct, environment: str) -> str:
    stack = Stack.of(scope)
    name = f"rebound/{environment}/tenants/{PRINCIPAL_TENANT}/*"
    return f"arn:{stack.partition}:secretsmanager:{stack.region}:{stack.account}:secret:{name}"


class TenantSecretsRole(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, environment: str, reader: iam.IRole) -> None:
        super().__init__(scope, construct_id)
        tagged = {
            "StringLike": {f"aws:RequestTag/{TENANT_TAG}": "?*"},
            "ForAllValues:StringEquals": {"aws:TagKeys": [TENANT_TAG]},
        }
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.PrincipalWithConditions(iam.ArnPrincipal(reader.role_arn), tagged),
            description=f"Rebound ({environment}): reads one tenant's task secrets, named by the session tag "
            f"{TENANT_TAG}",
        )
        # Session tags need sts:TagSession beside sts:AssumeRole, under the same conditions.
        self.role.assume_role_policy.add_statements(  # type: ignore[union-attr]
            iam.PolicyStatement(
                actions=["sts:TagSession"],
                principals=[iam.ArnPrincipal(reader.role_arn)],
                conditions=tagged,
            )
        )
        parameters = tenant_parameter_arn(self, environment)
        secrets = tenant_secret_arn(self, environment)
        self.role.add_to_policy(iam.PolicyStatement(actions=["ssm:GetParameter"], resources=[parameters]))
        self.role.add_to_policy(
            iam.PolicyStatement(actions=["secretsmanager:GetSecretValue"], resources=[secrets])
        )
        reason = (
            "A tenant's secrets are the names under its own path; the session tag set when the "
            "executor assumes this role picks the one tenant, so the wildcard never spans tenants."
        )
        for arn in (parameters, secrets):
            # cdk-nag writes the policy variable as <aws:PrincipalTag/...> in the finding's id
            finding = resource_finding(self.role, "AwsSolutions-IAM5", arn)
            acknowledge(
                self.role, finding.replace(PRINCIPAL_TENANT, f"<aws:PrincipalTag/{TENANT_TAG}>"), reason
            )
        reader.add_to_principal_policy(
            iam.PolicyStatement(actions=["sts:AssumeRole", "sts:TagSession"], resources=[self.role.role_arn])
        )
