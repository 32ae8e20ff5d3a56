"""IAM holds the tenant line on secrets: the executor reads a task's secrets only through the tenant
secrets role, assumed with the session tag ``rebound:tenant``, whose policy names the tagged
tenant's path and nothing else (``rebound_infra.constructs.tenant_secrets``)."""

from __future__ import annotations

from typing import Any

import pytest
from infra_helpers import Synth, as_list, flatten, mentions, role_statements

from rebound import resources as r

pytestmark = pytest.mark.infra

TAG = "${aws:PrincipalTag/rebound:tenant}"


def reader_role(synth: Synth, env: str) -> str:
    return synth.logical_id(env, synth.stacks[env].tenant_secrets.role)


def executor_role(synth: Synth, env: str) -> str:
    return synth.logical_id(env, synth.stacks[env].functions["executor"].role)


def test_the_tenant_secrets_role_reads_only_the_tagged_tenants_path(synth: Synth, env: str) -> None:
    statements = role_statements(synth.template(env), reader_role(synth, env))
    allowed = [st for st in statements if st["Effect"] == "Allow"]
    by_action = {action: st for st in allowed for action in as_list(st["Action"])}
    assert set(by_action) == {"ssm:GetParameter", "secretsmanager:GetSecretValue"}
    parameter = flatten(by_action["ssm:GetParameter"]["Resource"])
    secret = flatten(by_action["secretsmanager:GetSecretValue"]["Resource"])
    assert f"parameter/rebound/{env}/tenants/{TAG}/*" in parameter
    assert f"secret:rebound/{env}/tenants/{TAG}/*" in secret


def test_only_the_executor_may_assume_it_and_only_with_a_tenant_tag(synth: Synth, env: str) -> None:
    template = synth.template(env)
    role = template["Resources"][reader_role(synth, env)]
    trust = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    executor = executor_role(synth, env)
    actions: set[str] = set()
    for st in trust:
        assert st["Effect"] == "Allow"
        assert all(mentions(p, executor) for p in as_list(st["Principal"]["AWS"]))
        conditions: dict[str, Any] = st["Condition"]
        assert conditions["StringLike"] == {"aws:RequestTag/rebound:tenant": "?*"}
        assert conditions["ForAllValues:StringEquals"] == {"aws:TagKeys": ["rebound:tenant"]}
        actions.update(as_list(st["Action"]))
    assert actions == {"sts:AssumeRole", "sts:TagSession"}


def test_the_executor_reads_tenant_secrets_only_through_that_role(synth: Synth, env: str) -> None:
    template = synth.template(env)
    executor = executor_role(synth, env)
    statements = [st for st in role_statements(template, executor) if st["Effect"] == "Allow"]
    reader = reader_role(synth, env)
    assumes = [st for st in statements if "sts:AssumeRole" in as_list(st["Action"])]
    assert assumes and all(mentions(res, reader) for st in assumes for res in as_list(st["Resource"]))
    for st in statements:  # no direct read reaches a tenant's path
        if set(as_list(st["Action"])) & {"ssm:GetParameter", "secretsmanager:GetSecretValue"}:
            assert "/tenants/" not in flatten(st["Resource"])
    function = synth.logical_id(env, synth.stacks[env].functions["executor"].function)
    variables = template["Resources"][function]["Properties"]["Environment"]["Variables"]
    assert mentions(variables[r.ENV_TENANT_SECRETS_ROLE], reader)
