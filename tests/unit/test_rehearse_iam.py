"""The rehearsal's IAM evaluator and its map from AWS calls to what IAM authorizes."""

from __future__ import annotations

import pytest

from rebound_local.rehearse.calls import Arns, authorizations
from rebound_local.rehearse.iam import evaluate, evaluate_with_key_policy

pytestmark = pytest.mark.unit

TABLE = "arn:aws:dynamodb:us-east-1:123456789012:table/Rebound-dev-Stateruns74DA12C1-ABCDEFGHIJKLM"
ARNS = Arns("us-east-1", "123456789012")


def allow(actions: list[str], resources: list[str], **extra: object) -> dict[str, object]:
    return {"Effect": "Allow", "Action": actions, "Resource": resources, **extra}


def test_an_action_is_allowed_only_on_the_resources_a_statement_names() -> None:
    policy = [allow(["dynamodb:GetItem", "dynamodb:Query"], [TABLE, f"{TABLE}/index/*"])]
    assert evaluate(policy, "dynamodb:GetItem", TABLE).allowed
    assert evaluate(policy, "dynamodb:query", f"{TABLE}/index/by_task").allowed  # actions ignore case
    assert not evaluate(policy, "dynamodb:PutItem", TABLE).allowed
    assert not evaluate(policy, "dynamodb:GetItem", TABLE.replace("runs", "tasks")).allowed
    assert evaluate([], "dynamodb:GetItem", TABLE).reason == "no statement allows it"


def test_an_explicit_deny_wins_over_any_allow() -> None:
    policy = [
        allow(["dynamodb:*"], ["*"]),
        {"Sid": "AppendOnly", "Effect": "Deny", "Action": "dynamodb:UpdateItem", "Resource": TABLE},
    ]
    decision = evaluate(policy, "dynamodb:UpdateItem", TABLE)
    assert not decision.allowed and "AppendOnly" in decision.reason
    assert evaluate(policy, "dynamodb:PutItem", TABLE).allowed


def test_wildcards_and_not_action_match_as_iam_does() -> None:
    policy = [
        {"Effect": "Allow", "NotAction": "iam:*", "Resource": "arn:aws:sqs:*:123456789012:Rebound-?ev-*"}
    ]
    assert evaluate(policy, "sqs:SendMessage", "arn:aws:sqs:us-east-1:123456789012:Rebound-dev-q").allowed
    assert not evaluate(policy, "iam:PassRole", "arn:aws:sqs:us-east-1:123456789012:Rebound-dev-q").allowed
    assert not evaluate(policy, "sqs:SendMessage", "arn:aws:sqs:us-east-1:123456789012:Other-dev-q").allowed


def test_conditions_are_evaluated_and_an_unknown_operator_fails_closed() -> None:
    tagged = allow(
        ["sts:AssumeRole"], ["*"], Condition={"StringEquals": {"aws:RequestTag/rebound:tenant": "acme"}}
    )
    assert evaluate([tagged], "sts:AssumeRole", "r", {"aws:RequestTag/rebound:tenant": "acme"}).allowed
    assert not evaluate([tagged], "sts:AssumeRole", "r", {"aws:RequestTag/rebound:tenant": "globex"}).allowed
    assert not evaluate([tagged], "sts:AssumeRole", "r").allowed
    odd = allow(["sts:AssumeRole"], ["*"], Condition={"IpAddress": {"aws:SourceIp": "10.0.0.0/8"}})
    assert not evaluate([odd], "sts:AssumeRole", "r").allowed


def test_a_kms_key_is_usable_when_its_policy_names_the_role_or_delegates_to_the_account() -> None:
    role = "arn:aws:iam::123456789012:role/Rebound-dev-FunctionsexecutorRole-ABC"
    key = "arn:aws:kms:us-east-1:123456789012:key/0b5e6f7a-1234-4c2d-9e8f-0123456789ab"
    writers = [
        {"Effect": "Allow", "Principal": {"AWS": [role]}, "Action": ["kms:GenerateMac"], "Resource": "*"}
    ]
    account = [
        {
            "Effect": "Allow",
            "Principal": {"AWS": "arn:aws:iam::123456789012:root"},
            "Action": "kms:*",
            "Resource": "*",
        }
    ]
    assert evaluate_with_key_policy(role, [], writers, "kms:GenerateMac", key).allowed
    assert not evaluate_with_key_policy(role, [], writers, "kms:VerifyMac", key).allowed
    assert not evaluate_with_key_policy(role, [], account, "kms:GenerateMac", key).allowed
    assert evaluate_with_key_policy(
        role, [allow(["kms:GenerateMac"], [key])], account, "kms:GenerateMac", key
    ).allowed


def test_a_transaction_is_authorized_item_by_item_and_a_schedule_hands_over_its_role() -> None:
    items = [
        {"Put": {"TableName": "runs"}},
        {"Update": {"TableName": "control"}},
        {"ConditionCheck": {"TableName": "tasks"}},
    ]
    assert authorizations("dynamodb", "TransactWriteItems", {"TransactItems": items}, ARNS) == [
        ("dynamodb:PutItem", "arn:aws:dynamodb:us-east-1:123456789012:table/runs"),
        ("dynamodb:UpdateItem", "arn:aws:dynamodb:us-east-1:123456789012:table/control"),
        ("dynamodb:ConditionCheckItem", "arn:aws:dynamodb:us-east-1:123456789012:table/tasks"),
    ]
    schedule = {
        "Name": "retry-x",
        "GroupName": "g",
        "Target": {"RoleArn": "arn:aws:iam::123456789012:role/s"},
    }
    assert authorizations("scheduler", "CreateSchedule", schedule, ARNS) == [
        ("scheduler:CreateSchedule", "arn:aws:scheduler:us-east-1:123456789012:schedule/g/retry-x"),
        ("iam:PassRole", "arn:aws:iam::123456789012:role/s"),
    ]
    url = "https://sqs.us-east-1.amazonaws.com/123456789012/Rebound-dev-q"
    assert authorizations("sqs", "SendMessageBatch", {"QueueUrl": url}, ARNS) == [
        ("sqs:SendMessage", "arn:aws:sqs:us-east-1:123456789012:Rebound-dev-q")
    ]
