"""Queues: built from SPEC, encrypted, TLS-only, with the redrive policy and visibility the spec and
AWS's guidance demand."""

from __future__ import annotations

import json
from typing import Any

import pytest
from infra_helpers import Synth, as_list, ref_target

from rebound import resources as r

pytestmark = pytest.mark.infra


def queue_id(synth: Synth, env: str, logical: str) -> str:
    return synth.logical_id(env, synth.stacks[env].messaging.queues[logical])


def queue_props(synth: Synth, env: str, logical: str) -> dict[str, Any]:
    return dict(synth.template(env)["Resources"][queue_id(synth, env, logical)]["Properties"])


def test_every_queue_is_encrypted_at_rest(synth: Synth, env: str) -> None:
    for spec in r.SPEC.queues:
        props = queue_props(synth, env, spec.logical)
        assert props.get("SqsManagedSseEnabled") is True or "KmsMasterKeyId" in props, spec.logical


def test_every_queue_refuses_requests_without_tls(synth: Synth, env: str) -> None:
    policies = synth.resources(env, "AWS::SQS::QueuePolicy").values()
    for spec in r.SPEC.queues:
        qid = queue_id(synth, env, spec.logical)
        denies = [
            st
            for p in policies
            if any(ref_target(q) == qid for q in p["Properties"]["Queues"])
            for st in p["Properties"]["PolicyDocument"]["Statement"]
            if st["Effect"] == "Deny"
            and st.get("Condition", {}).get("Bool", {}).get("aws:SecureTransport") == "false"
        ]
        assert denies, f"{spec.logical} accepts plain HTTP"
        assert any("sqs:*" in as_list(st["Action"]) for st in denies)


def test_redrive_policies_point_at_the_spec_dlq_with_its_max_receive_count(synth: Synth, env: str) -> None:
    for spec in r.SPEC.queues:
        props = queue_props(synth, env, spec.logical)
        if spec.dead_letter is None:
            assert "RedrivePolicy" not in props, spec.logical
            continue
        redrive = props["RedrivePolicy"]
        assert redrive["maxReceiveCount"] == spec.max_receive_count
        assert ref_target(redrive["deadLetterTargetArn"]) == queue_id(synth, env, spec.dead_letter)


def test_execution_queue_redrives_to_the_execution_dlq_after_five_receives(synth: Synth) -> None:
    redrive = queue_props(synth, "prod", "execution")["RedrivePolicy"]
    assert redrive["maxReceiveCount"] == 5
    assert ref_target(redrive["deadLetterTargetArn"]) == queue_id(synth, "prod", "dlq")


def test_dead_letter_queues_keep_messages_fourteen_days(synth: Synth, env: str) -> None:
    for logical in ("dlq", "control_dlq", "scheduler_dlq"):
        assert queue_props(synth, env, logical)["MessageRetentionPeriod"] == 14 * 86400


def test_visibility_timeout_is_at_least_six_times_the_consuming_function_timeout(
    synth: Synth, env: str
) -> None:
    resources = synth.template(env)["Resources"]
    mappings = synth.resources(env, "AWS::Lambda::EventSourceMapping").values()
    checked = 0
    for mapping in mappings:
        queue = ref_target(mapping["Properties"]["EventSourceArn"])
        if resources[queue]["Type"] != "AWS::SQS::Queue":
            continue
        function = resources[ref_target(mapping["Properties"]["FunctionName"])]
        assert resources[queue]["Properties"]["VisibilityTimeout"] >= 6 * function["Properties"]["Timeout"]
        checked += 1
    assert checked == sum(1 for f in r.SPEC.functions if f.queue)


def test_queues_outlive_the_stack_only_where_data_is_retained(synth: Synth) -> None:
    for env, policy in (("dev", "Delete"), ("prod", "Retain")):
        for spec in r.SPEC.queues:
            assert (
                synth.template(env)["Resources"][queue_id(synth, env, spec.logical)]["DeletionPolicy"]
                == policy
            )


def test_only_event_triggered_task_rules_of_this_bus_may_send_to_the_execution_queue(synth: Synth) -> None:
    policies = synth.resources("prod", "AWS::SQS::QueuePolicy").values()
    for logical in ("execution", "control_dlq"):
        qid = queue_id(synth, "prod", logical)
        [statement] = [
            st
            for p in policies
            if any(ref_target(q) == qid for q in p["Properties"]["Queues"])
            for st in p["Properties"]["PolicyDocument"]["Statement"]
            if st.get("Sid") == "EventTriggeredTaskRules"
        ]
        assert statement["Effect"] == "Allow"
        assert statement["Principal"] == {"Service": "events.amazonaws.com"}
        assert as_list(statement["Action"]) == ["sqs:SendMessage"]
        source = json.dumps(statement["Condition"]["ArnLike"]["aws:SourceArn"])
        assert ":rule/" in source and "/task-*" in source, source
        bus_id = synth.logical_id("prod", synth.stacks["prod"].events.bus)
        assert bus_id in source  # the rules of this environment's bus, and no other
