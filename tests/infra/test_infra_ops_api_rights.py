"""The ops API's role grants every AWS call its routes make, on the resource they make it on, and
nothing else.

The calls come from ``ops_api_calls.json``: tests/integration/test_ops_api_rights.py records them
(service, operation, logical resource) while the real handler serves each route against moto, and
fails when the file no longer matches what the routes call. Here each call becomes the IAM action
that authorizes it and is looked for in the synthesized template of every environment.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest
from infra_helpers import Synth, actions_on, all_actions, as_list, flatten, mentions, role_statements

from rebound import resources as r

pytestmark = pytest.mark.infra

CALLS = json.loads((Path(__file__).with_name("ops_api_calls.json")).read_text())
RECORDED = {tuple(call) for entry in CALLS["tests"].values() for call in entry["calls"]}
# Operations authorized by an IAM action of another name (a batch is authorized as its single form).
IAM_ACTION = {
    ("sqs", "SendMessageBatch"): "sqs:SendMessage",
    ("sqs", "DeleteMessageBatch"): "sqs:DeleteMessage",
    ("sqs", "ChangeMessageVisibilityBatch"): "sqs:ChangeMessageVisibility",
    ("lambda", "Invoke"): "lambda:InvokeFunction",
}
# What comes with the grants and is no call of the handler's own: its log stream; the KMS key of
# the alerts topic, or the environment's one data key (encryption: cmk) under its tables and
# queues; DescribeSecret with CDK's secret read; GetQueueUrl with CDK's send grant; handing the
# scheduler role to the schedules it writes.
PLUMBING = {
    "logs:CreateLogStream",
    "logs:PutLogEvents",
    "kms:Decrypt",
    "kms:Encrypt",
    "kms:ReEncrypt*",
    "kms:GenerateDataKey*",
    "secretsmanager:DescribeSecret",
    "sqs:GetQueueUrl",
    "iam:PassRole",
}


def needed(service: str) -> dict[str, set[str]]:
    """Logical resource -> the IAM actions the recorded calls of ``service`` need on it."""
    out: dict[str, set[str]] = defaultdict(set)
    for svc, operation, resource in RECORDED:
        if svc == service:
            out[resource].add(IAM_ACTION.get((svc, operation), f"{svc}:{operation}"))
    return out


def ops_statements(synth: Synth, env: str) -> list[dict[str, object]]:
    role = synth.stacks[env].functions[r.OPS_API_FUNCTION].role
    return role_statements(synth.template(env), synth.logical_id(env, role))


def test_the_recording_has_the_calls_every_route_needs() -> None:
    """A sanity floor: the file is the recording of real routes, not an empty list."""
    services = {svc for svc, _, _ in RECORDED}
    assert {"dynamodb", "sqs", "scheduler", "events", "cloudwatch", "lambda", "sns"} <= services


def test_each_table_grants_exactly_the_recorded_calls(synth: Synth, env: str) -> None:
    statements = ops_statements(synth, env)
    tables = needed("dynamodb")
    for spec in r.SPEC.tables:
        table = synth.logical_id(env, synth.stacks[env].state.tables[spec.logical])
        assert actions_on(statements, table) == tables.get(spec.logical, set()), spec.logical
    assert "dynamodb:UpdateItem" not in tables[r.AUDIT.logical]  # the audit trail is append-only


def test_each_queue_grants_the_recorded_calls_and_no_more(synth: Synth, env: str) -> None:
    statements = ops_statements(synth, env)
    queues = needed("sqs")
    assert {"sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility"} <= queues["dlq"]
    assert "sqs:SendMessage" in queues[r.EXECUTION.logical]  # the redrive's destination
    for spec in r.SPEC.queues:
        queue = synth.logical_id(env, synth.stacks[env].messaging.queues[spec.logical])
        granted = actions_on(statements, queue)
        assert queues.get(spec.logical, set()) <= granted <= queues.get(spec.logical, set()) | PLUMBING, (
            spec.logical,
            granted,
        )


def test_schedules_are_written_in_the_group_and_handed_only_the_scheduler_role(
    synth: Synth, env: str
) -> None:
    stack = synth.stacks[env]
    statements = ops_statements(synth, env)
    recorded = needed("scheduler")
    assert set(recorded) == {"group"}
    on_group = recorded["group"] - {"scheduler:ListSchedules"}
    writes = [st for st in statements if set(as_list(st["Action"])) & on_group]
    (statement,) = writes
    assert set(as_list(statement["Action"])) == on_group
    (arn,) = as_list(statement["Resource"])
    assert flatten(arn).endswith(f":schedule/{stack.scheduling.group.schedule_group_name}/*")
    scheduler_role = synth.logical_id(env, stack.scheduling.role)
    passes = [st for st in statements if "iam:PassRole" in as_list(st["Action"])]
    assert [as_list(st["Resource"]) for st in passes] == [[{"Fn::GetAtt": [scheduler_role, "Arn"]}]]


def test_star_is_granted_only_for_the_reads_aws_takes_no_resource_for(synth: Synth, env: str) -> None:
    statements = ops_statements(synth, env)
    star = {a for st in statements if "*" in as_list(st["Resource"]) for a in as_list(st["Action"])}
    assert star == needed("cloudwatch")["*"] | {"scheduler:ListSchedules"}
    assert "scheduler:ListSchedules" in needed("scheduler")["group"]


def test_rules_are_written_on_the_task_rules_of_the_environment_s_bus(synth: Synth, env: str) -> None:
    stack = synth.stacks[env]
    statements = ops_statements(synth, env)
    bus = synth.logical_id(env, stack.events.bus)
    recorded = needed("events")
    assert set(recorded) == {"bus"}
    granted = actions_on(statements, bus)
    assert granted == recorded["bus"]
    for st in statements:
        if set(as_list(st["Action"])) & granted:
            assert [flatten(a).endswith(f"rule/<Ref:{bus}>/task-*") for a in as_list(st["Resource"])] == [
                True
            ]


def test_it_invokes_only_itself_publishes_alerts_and_reads_the_completion_key(synth: Synth, env: str) -> None:
    stack = synth.stacks[env]
    statements = ops_statements(synth, env)
    assert needed("lambda") == {"self": {"lambda:InvokeFunction"}}
    function = synth.logical_id(env, stack.functions[r.OPS_API_FUNCTION].function)
    invokes = [st for st in statements if "lambda:InvokeFunction" in as_list(st["Action"])]
    assert [as_list(st["Resource"]) for st in invokes] == [[{"Fn::GetAtt": [function, "Arn"]}]]
    assert needed("sns") == {"topic": {"sns:Publish"}}
    assert "sns:Publish" in actions_on(statements, synth.logical_id(env, stack.observability.topic))
    # Locally the completion key is an SSM parameter; the stack makes it a generated secret.
    assert needed("ssm") == {"completion_key": {"ssm:GetParameter"}}
    assert "secretsmanager:GetSecretValue" in actions_on(
        statements, synth.logical_id(env, stack.completion_key)
    )


def test_it_may_sign_audit_records_with_the_audit_key(synth: Synth, env: str) -> None:
    """The audit key's policy (not the role's) names the audit writers; the ops API is one."""
    stack = synth.stacks[env]
    assert needed("kms") == {"audit_key": {"kms:GenerateMac"}}
    role = synth.logical_id(env, stack.functions[r.OPS_API_FUNCTION].role)
    key = synth.template(env)["Resources"][synth.logical_id(env, stack.audit_key.key)]
    signers = [
        st
        for st in key["Properties"]["KeyPolicy"]["Statement"]
        if "kms:GenerateMac" in as_list(st["Action"]) and mentions(st["Principal"], role)
    ]
    assert len(signers) == 1 and signers[0]["Effect"] == "Allow"


def test_nothing_is_granted_that_no_route_calls(synth: Synth, env: str) -> None:
    recorded = {IAM_ACTION.get((svc, op), f"{svc}:{op}") for svc, op, _ in RECORDED}
    recorded = {a.replace("ssm:GetParameter", "secretsmanager:GetSecretValue") for a in recorded}
    extra = all_actions(ops_statements(synth, env)) - recorded - PLUMBING
    assert not extra, f"granted to the ops API but called by no route: {sorted(extra)}"
