"""A function's role in a synthesized template, asked about calls made on another environment.

The ops API's route tests run against a local environment; ``RoleCheck`` renames each call's
resources to the template's (table, queue, bus, group, topic, key, function names; the completion
key, an SSM parameter locally, is the stack's generated secret), finds what IAM authorizes for it
(``calls``) and decides it under the function's role (``iam``, with the key policy for KMS). What
it allowed is kept, so that the grants no call used can be listed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from rebound.settings import Settings, settings_from_document
from rebound_local.rehearse import calls, iam
from rebound_local.rehearse.template import ACCOUNT, REGION, Template

PLUMBING = frozenset(
    {
        "logs:CreateLogStream",
        "logs:PutLogEvents",
        "kms:Decrypt",
        "kms:Encrypt",
        "kms:ReEncrypt*",
        "kms:GenerateDataKey*",
        "secretsmanager:DescribeSecret",
        "sqs:GetQueueUrl",
        "xray:PutTraceSegments",  # active tracing (tracing: true): Lambda sends the segments
        "xray:PutTelemetryRecords",
    }
)
"""Granted with the rights a function's code uses, never called by it: its log stream, a KMS key
under a topic, table or queue it uses, ``DescribeSecret`` with CDK's secret read, ``GetQueueUrl``
with CDK's send grant."""


def _names(local: Settings, deployed: Settings) -> dict[str, str]:
    out: dict[str, str] = {}
    for logical, name in local.tables.items():
        out[name] = deployed.tables[logical]
    for logical, ref in local.queues.items():
        there = deployed.queues[logical]
        out.update({ref.url: there.url, ref.arn: there.arn, ref.name: there.name})
    pairs = [
        (local.bus_name, deployed.bus_name),
        (local.schedule_group, deployed.schedule_group),
        (local.scheduler_role_arn, deployed.scheduler_role_arn),
        (local.topic_arn, deployed.topic_arn),
        (local.audit_key_id, deployed.audit_key_id),
    ]
    if local.flags and deployed.flags:  # AppConfig's ids: application, environment, profile, strategy
        pairs += list(zip(local.flags.split(":")[1:], deployed.flags.split(":")[1:], strict=True))
    out.update({a: b for a, b in pairs if a and b})
    return out


def _renamed(value: Any, names: Mapping[str, str]) -> Any:
    if isinstance(value, str):
        return names.get(value, value)
    if isinstance(value, list):
        return [_renamed(v, names) for v in value]
    if isinstance(value, dict):
        return {names.get(k, k): _renamed(v, names) for k, v in value.items()}  # BatchGetItem's tables
    return value


class RoleCheck:
    def __init__(
        self, template: Template, function: str, environment: str, local: Settings, local_function: str
    ) -> None:
        self.function = template.functions()[function]
        self.deployed = settings_from_document(template.resources_document(environment))
        self.local = local
        self.names = {**_names(local, self.deployed), local_function: self.function.name}
        self.key_policies = template.key_policies()
        self.arns = calls.Arns(REGION, ACCOUNT)
        self.used: set[tuple[str, str]] = set()

    def decide(
        self, service: str, operation: str, params: dict[str, Any]
    ) -> list[tuple[str, str, iam.Decision]]:
        """Each (action, resource, decision) the call needs, on the template's resources."""
        if service == "ssm" and params.get("Name") == self.local.completion_key:
            service, operation, params = (
                "secretsmanager",
                "GetSecretValue",
                {"SecretId": self.deployed.completion_key},
            )
        if service == "appconfigdata" and operation == "GetLatestConfiguration":
            params = calls.configuration_read(params)  # the ids its session's token carries
        out = []
        for action, resource in calls.authorizations(
            service, operation, _renamed(params, self.names), self.arns
        ):
            if action.startswith("kms:") and resource in self.key_policies:
                decision = iam.evaluate_with_key_policy(
                    self.function.role_arn,
                    self.function.statements,
                    self.key_policies[resource],
                    action,
                    resource,
                )
            else:
                decision = iam.evaluate(self.function.statements, action, resource)
            if decision.allowed:
                self.used.add((action, resource.split("/index/")[0]))
            out.append((action, resource, decision))
        return out

    def unused(self) -> list[str]:
        return unused_grants(self.function.statements, self.used)


def unused_grants(statements: Iterable[Mapping[str, Any]], used: set[tuple[str, str]]) -> list[str]:
    """The grants (action on resource) of ``statements`` that no (action, resource) of ``used``
    needed, but ``PLUMBING``; a grant on a table's indexes counts as used by the same action on
    the table or any of its indexes."""
    out = []
    for statement in statements:
        if statement.get("Effect") != "Allow":
            continue
        actions = statement.get("Action") or []
        resources = statement.get("Resource") or []
        for action in [actions] if isinstance(actions, str) else actions:
            if action in PLUMBING:
                continue
            for resource in [resources] if isinstance(resources, str) else resources:
                pattern = str(resource).split("/index/")[0]
                if not any(
                    iam.glob_match(action, a, ignore_case=True) and iam.glob_match(pattern, r)
                    for a, r in used
                ):
                    out.append(f"{action} on {resource}")
    return sorted(set(out))
