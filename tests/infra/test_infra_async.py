"""Asynchronous attempts in the stack: the generated completion key, who may read it, the
functions' environment naming it, and the rule that brings workers' reports to the retry queue."""

from __future__ import annotations

import pytest
from infra_helpers import Synth, actions_on, role_statements

from rebound import resources as r

pytestmark = pytest.mark.infra
READERS = {"executor", "retry_scheduler", "ops_api"}


def test_the_completion_key_is_a_generated_secret_read_only_by_the_functions_that_use_it(
    synth: Synth, env: str
) -> None:
    stack = synth.stacks[env]
    key_id = synth.logical_id(env, stack.completion_key)
    secret = synth.template(env)["Resources"][key_id]
    assert secret["Type"] == "AWS::SecretsManager::Secret"
    assert secret["Properties"]["GenerateSecretString"]["PasswordLength"] == 64
    for logical, built in stack.functions.functions.items():
        statements = role_statements(synth.template(env), synth.logical_id(env, built.role))
        reads = "secretsmanager:GetSecretValue" in actions_on(statements, key_id)
        assert reads is (logical in READERS), logical


def test_every_function_is_told_where_the_key_is(synth: Synth) -> None:
    stack = synth.stacks["prod"]
    key_id = synth.logical_id("prod", stack.completion_key)
    for built in stack.functions.functions.values():
        function = synth.template("prod")["Resources"][synth.logical_id("prod", built.function)]
        variables = function["Properties"]["Environment"]["Variables"]
        assert variables[r.ENV_COMPLETION_KEY] == {"Ref": key_id}


def test_workers_reports_on_the_bus_go_to_the_retry_queue(synth: Synth) -> None:
    stack = synth.stacks["prod"]
    rule = synth.template("prod")["Resources"][synth.logical_id("prod", stack.events.rules["task_reports"])]
    pattern = rule["Properties"]["EventPattern"]
    assert pattern["detail-type"] == [
        "rebound.task.heartbeat",
        "rebound.task.completed",
        "rebound.task.failed",
    ]
    assert pattern["source"] == [r.SPEC.event_source]
    [target] = rule["Properties"]["Targets"]
    retry = synth.logical_id("prod", stack.messaging.queues["retry"])
    assert target["Arn"] == {"Fn::GetAtt": [retry, "Arn"]}
