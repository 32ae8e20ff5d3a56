"""cdk-nag acknowledgments: each names the rule (and finding), where it applies, and why.

cdk-nag 3 reports through CDK's policy validation; a finding that is not acknowledged fails
synthesis. Acknowledge on the narrowest construct that has the finding, never on a whole stack,
and for IAM5 name the exact finding (``AwsSolutions-IAM5[Resource::...]``): cdk-nag 3 matches
findings exactly, so a new wildcard fails synthesis until someone explains it.
"""

from __future__ import annotations

import json
from typing import Any

from aws_cdk import Acknowledgment, Stack, Validations
from constructs import IConstruct


def acknowledge(scope: IConstruct, rule: str, reason: str) -> None:
    if len(reason.strip()) < 40:
        raise ValueError(f"acknowledging {rule} needs a real reason, not {reason!r}")
    Validations.of(scope).acknowledge(Acknowledgment(id=rule, reason=reason))


def render(value: Any) -> str:
    """A resolved CloudFormation value as cdk-nag writes it in a finding id."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and len(value) == 1:
        ((fn, arg),) = value.items()
        if fn == "Ref":
            return f"<{arg}>"
        if fn == "Fn::GetAtt":
            return f"<{arg[0]}.{arg[1]}>"
        if fn == "Fn::Join":
            separator, parts = arg
            return str(separator).join(render(p) for p in parts)
    return json.dumps(value, sort_keys=True)


def resource_finding(scope: IConstruct, rule: str, arn: str) -> str:
    """``rule[Resource::<arn as cdk-nag renders it>]`` for a wildcard resource ARN."""
    return f"{rule}[Resource::{render(Stack.of(scope).resolve(arn))}]"
