"""The event bus: ``SPEC.rules`` deliver to their queues with EventBridge's retry policy and the
control DLQ behind them; the bus archives Rebound's events for the configured retention; SQS
accepts events only from this bus's rules.

(That the ``EventTriggeredTaskRules`` statement exists, allows ``events.amazonaws.com`` to
``sqs:SendMessage`` and names ``task-*`` rules of this bus is in ``test_infra_messaging.py``.)
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from infra_helpers import Synth, as_list, flatten, ref_target

from rebound import resources as r
from rebound.domain.ids import task_rule_name, workstream_rule_name
from rebound_infra.app import REPO_ROOT
from rebound_infra.constructs.events import RULE_MAX_EVENT_AGE, RULE_RETRY_ATTEMPTS

pytestmark = pytest.mark.infra


@cache
def configured(env: str) -> dict[str, Any]:
    """``config/environments/<env>.yaml`` as written."""
    path = REPO_ROOT / "config" / "environments" / f"{env}.yaml"
    return dict(yaml.safe_load(path.read_text(encoding="utf-8")))


def queue_id(synth: Synth, env: str, logical: str) -> str:
    return synth.logical_id(env, synth.stacks[env].messaging.queues[logical])


def bus_id(synth: Synth, env: str) -> str:
    return synth.logical_id(env, synth.stacks[env].events.bus)


def rule_id(synth: Synth, env: str, logical: str) -> str:
    return synth.logical_id(env, synth.stacks[env].events.rules[logical])


def queue_statements(synth: Synth, env: str, logical: str) -> list[dict[str, Any]]:
    qid = queue_id(synth, env, logical)
    return [
        st
        for policy in synth.resources(env, "AWS::SQS::QueuePolicy").values()
        if any(ref_target(q) == qid for q in policy["Properties"]["Queues"])
        for st in policy["Properties"]["PolicyDocument"]["Statement"]
    ]


def test_rule_retry_constants_are_the_eventbridge_maximums() -> None:
    assert RULE_RETRY_ATTEMPTS == 185
    assert RULE_MAX_EVENT_AGE.to_seconds() == 86400


def test_the_bus_has_exactly_the_spec_rules(synth: Synth, env: str) -> None:
    expected = {rule_id(synth, env, spec.logical) for spec in r.SPEC.rules}
    assert set(synth.resources(env, "AWS::Events::Rule")) == expected
    assert len(expected) == len(r.SPEC.rules)


@pytest.mark.parametrize("spec", r.SPEC.rules, ids=lambda s: s.logical)
def test_spec_rule_delivers_its_detail_types_to_its_queue_with_retries_and_the_control_dlq(
    synth: Synth, env: str, spec: r.RuleSpec
) -> None:
    props = synth.template(env)["Resources"][rule_id(synth, env, spec.logical)]["Properties"]
    assert props["EventBusName"] == {"Ref": bus_id(synth, env)}
    assert props["State"] == "ENABLED"
    assert props["EventPattern"] == {"source": [r.SPEC.event_source], "detail-type": list(spec.detail_types)}
    (target,) = props["Targets"]
    assert target["Arn"] == {"Fn::GetAtt": [queue_id(synth, env, spec.queue), "Arn"]}
    assert target["RetryPolicy"] == {"MaximumRetryAttempts": 185, "MaximumEventAgeInSeconds": 86400}
    assert target["DeadLetterConfig"] == {
        "Arn": {"Fn::GetAtt": [queue_id(synth, env, r.CONTROL_DLQ.logical), "Arn"]}
    }
    # The consumer gets the event as put on the bus: no input transformation, no FIFO parameters.
    assert not {"Input", "InputPath", "InputTransformer", "SqsParameters"} & set(target)


@pytest.mark.parametrize("spec", r.SPEC.rules, ids=lambda s: s.logical)
def test_spec_rule_may_send_to_its_queue_and_to_the_control_dlq(
    synth: Synth, env: str, spec: r.RuleSpec
) -> None:
    """Without these grants EventBridge drops the event (or the dead letter) silently."""
    rule_arn = {"Fn::GetAtt": [rule_id(synth, env, spec.logical), "Arn"]}
    for queue in (spec.queue, r.CONTROL_DLQ.logical):
        statements = queue_statements(synth, env, queue)
        grants = [
            st
            for st in statements
            if st["Effect"] == "Allow"
            and st.get("Condition", {}).get("ArnEquals") == {"aws:SourceArn": rule_arn}
        ]
        if synth.stacks[env].data_key is not None and not grants:
            # a KMS-encrypted queue: CDK's grant has no condition; a Deny keeps it to this bus's rules
            grants = [
                st
                for st in statements
                if st["Effect"] == "Allow"
                and "Condition" not in st
                and st.get("Principal", {}).get("Service")
            ]
            [deny] = [st for st in statements if st.get("Sid") == "OnlyThisBusRules"]
            assert deny["Effect"] == "Deny" and "ArnNotLike" in deny["Condition"]
        assert len(grants) == 1, (spec.logical, queue)
        (st,) = grants
        assert st["Principal"] == {"Service": "events.amazonaws.com"}
        assert "sqs:SendMessage" in as_list(st["Action"])
        assert st["Resource"] == {"Fn::GetAtt": [queue_id(synth, env, queue), "Arn"]}


def test_bus_archives_rebound_events_for_the_configured_retention(synth: Synth, env: str) -> None:
    archives = [
        a["Properties"]
        for a in synth.resources(env, "AWS::Events::Archive").values()
        if a["Properties"]["SourceArn"] == {"Fn::GetAtt": [bus_id(synth, env), "Arn"]}
    ]
    assert len(archives) == 1
    (archive,) = archives
    assert archive["EventPattern"] == {"source": [r.SPEC.event_source]}
    assert r.SPEC.event_source == "io.rebound"
    assert archive["RetentionDays"] == configured(env)["bus_archive_retention_days"]


def test_archive_retention_differs_per_environment() -> None:
    # Distinct values, so the test above tells the environments apart.
    assert [configured(e)["bus_archive_retention_days"] for e in ("dev", "staging", "prod")] == [3, 14, 30]


@pytest.mark.parametrize("logical", [r.EXECUTION.logical, r.CONTROL_DLQ.logical])
def test_task_rule_grant_is_exactly_the_task_rules_of_this_bus_in_this_account(
    synth: Synth, env: str, logical: str
) -> None:
    (st,) = [s for s in queue_statements(synth, env, logical) if s.get("Sid") == "EventTriggeredTaskRules"]
    assert st["Resource"] == {"Fn::GetAtt": [queue_id(synth, env, logical), "Arn"]}
    assert set(st["Condition"]) == {"ArnLike"}
    assert set(st["Condition"]["ArnLike"]) == {"aws:SourceArn"}
    source = flatten(st["Condition"]["ArnLike"]["aws:SourceArn"])
    assert source == (
        "arn:<Ref:AWS::Partition>:events:<Ref:AWS::Region>:<Ref:AWS::AccountId>:rule/"
        f"<Ref:{bus_id(synth, env)}>/{task_rule_name('*')}"
    )
    assert task_rule_name("*") == "task-*"


@pytest.mark.parametrize("logical", [r.EXECUTION.logical, r.ESCALATION.logical, r.CONTROL_DLQ.logical])
def test_events_reach_the_queue_only_from_rules_of_this_bus(synth: Synth, env: str, logical: str) -> None:
    """Every Allow on the execution queue, the escalation queue and the control DLQ is for
    EventBridge, conditioned on a rule of this stack that uses the queue, on the ``task-*`` rules
    of this bus (execution queue, control DLQ) or on its ``ws-*`` rules (escalation queue,
    control DLQ)."""
    uses = {
        rule_id(synth, env, spec.logical)
        for spec in r.SPEC.rules
        if logical in (spec.queue, r.CONTROL_DLQ.logical)
    }
    prefixes = {
        "EventTriggeredTaskRules": ("task-*", {r.EXECUTION.logical, r.CONTROL_DLQ.logical}),
        "EventTriggeredWorkstreamRules": ("ws-*", {r.ESCALATION.logical, r.CONTROL_DLQ.logical}),
    }
    allowed = [st for st in queue_statements(synth, env, logical) if st["Effect"] == "Allow"]
    assert allowed
    seen: set[str] = set()
    for st in allowed:
        assert st["Principal"] == {"Service": "events.amazonaws.com"}, st
        assert set(as_list(st["Action"])) <= {"sqs:SendMessage", "sqs:GetQueueAttributes", "sqs:GetQueueUrl"}
        if st.get("Sid") in prefixes:
            seen.add(prefixes[st["Sid"]][0])
            continue
        if "Condition" not in st:  # CDK's grant to an encrypted target queue, for its rules: the
            # OnlyThisBusRules Deny bounds it to this bus's rules
            assert any(d.get("Sid") == "OnlyThisBusRules" for d in queue_statements(synth, env, logical)), st
            seen |= uses
            continue
        assert set(st["Condition"]) == {"ArnEquals"}, st
        rule = ref_target(st["Condition"]["ArnEquals"]["aws:SourceArn"])
        assert rule in uses, st
        seen.add(str(rule))
    assert seen == uses | {prefix for prefix, queues in prefixes.values() if logical in queues}


@pytest.mark.parametrize("logical", [r.ESCALATION.logical, r.CONTROL_DLQ.logical])
def test_workstream_rule_grant_is_exactly_the_workstream_rules_of_this_bus_in_this_account(
    synth: Synth, env: str, logical: str
) -> None:
    (st,) = [
        s for s in queue_statements(synth, env, logical) if s.get("Sid") == "EventTriggeredWorkstreamRules"
    ]
    assert st["Effect"] == "Allow" and st["Principal"] == {"Service": "events.amazonaws.com"}
    assert as_list(st["Action"]) == ["sqs:SendMessage"]
    assert st["Resource"] == {"Fn::GetAtt": [queue_id(synth, env, logical), "Arn"]}
    source = flatten(st["Condition"]["ArnLike"]["aws:SourceArn"])
    assert source == (
        "arn:<Ref:AWS::Partition>:events:<Ref:AWS::Region>:<Ref:AWS::AccountId>:rule/"
        f"<Ref:{bus_id(synth, env)}>/{workstream_rule_name('*')}"
    )
    assert workstream_rule_name("*") == "ws-*"


def test_the_event_schemas_are_published_to_a_registry_of_the_environment(synth: Synth, env: str) -> None:
    import jsonschema

    from rebound.domain.events import EventType
    from rebound_infra.constructs.schema_registry import draft4

    source = synth.stacks[env].config.outbox.source
    [registry] = synth.resources(env, "AWS::EventSchemas::Registry").values()
    assert registry["Properties"]["RegistryName"] == f"rebound-{env}"
    schemas = {
        s["Properties"]["SchemaName"]: s["Properties"]
        for s in synth.resources(env, "AWS::EventSchemas::Schema").values()
    }
    assert set(schemas) == {f"{source}@{t.value}" for t in EventType}
    samples = Path(__file__).resolve().parents[2] / "events" / "bus"
    for name, props in schemas.items():
        assert props["Type"] == "JSONSchemaDraft4"
        content = json.loads(props["Content"])
        assert content["$schema"] == "http://json-schema.org/draft-04/schema#"
        detail_type = name.split("@", 1)[1]
        committed = json.loads((samples.parent / "schemas" / f"{detail_type}.json").read_text())
        assert content == draft4(committed), "the registry holds the committed schema, as draft 4"
        sample = json.loads((samples / f"{detail_type}.json").read_text())
        jsonschema.Draft4Validator(content).validate(sample["detail"])


def test_draft4_keeps_what_a_schema_allows_and_refuses() -> None:
    import jsonschema

    from rebound_infra.constructs.schema_registry import draft4

    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {"v": {"const": 1}, "n": {"type": "number", "exclusiveMinimum": 0}},
        "required": ["v", "n"],
    }
    converted = jsonschema.Draft4Validator(draft4(schema))
    assert converted.is_valid({"v": 1, "n": 0.5})
    assert not converted.is_valid({"v": 2, "n": 0.5}) and not converted.is_valid({"v": 1, "n": 0})
