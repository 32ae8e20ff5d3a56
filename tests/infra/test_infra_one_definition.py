"""One definition: the local cloud (``rebound_local.provision``) and the synthesized stack are built
from the same ``rebound.resources.SPEC``, so they agree on queue attributes, redrive, tables, keys,
indexes, TTL, streams, the bus and its rules. A drift on either side fails here."""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest
from infra_helpers import Synth, ref_target

from rebound import resources as r
from rebound.settings import Settings

pytestmark = pytest.mark.infra

ENV = "prod"


def template_id(synth: Synth, construct: Any) -> str:
    return synth.logical_id(ENV, construct)


def logical_of_queue(synth: Synth) -> dict[str, str]:
    """Template logical id -> SPEC queue name."""
    return {template_id(synth, q): name for name, q in synth.stacks[ENV].messaging.queues.items()}


def local_queue_of_arn(settings: Settings) -> dict[str, str]:
    return {ref.arn: name for name, ref in settings.queues.items()}


def test_queues_match_attributes_and_redrive(
    synth: Synth, settings: Settings, aws: boto3.session.Session
) -> None:
    sqs = aws.client("sqs")
    resources = synth.template(ENV)["Resources"]
    by_id = logical_of_queue(synth)
    by_arn = local_queue_of_arn(settings)
    for spec in r.SPEC.queues:
        cloud = resources[template_id(synth, synth.stacks[ENV].messaging.queues[spec.logical])]["Properties"]
        local = sqs.get_queue_attributes(QueueUrl=settings.queue(spec.logical).url, AttributeNames=["All"])[
            "Attributes"
        ]
        for attribute in ("VisibilityTimeout", "MessageRetentionPeriod", "ReceiveMessageWaitTimeSeconds"):
            assert int(local[attribute]) == cloud[attribute], (spec.logical, attribute)
        assert int(local.get("DelaySeconds", "0")) == cloud.get("DelaySeconds", 0)
        # encrypted on both sides: prod's customer-managed key (encryption: cmk), SQS's own key locally
        assert local.get("SqsManagedSseEnabled") == "true"
        assert cloud.get("SqsManagedSseEnabled") is True or "KmsMasterKeyId" in cloud
        if spec.dead_letter is None:
            assert "RedrivePolicy" not in local and "RedrivePolicy" not in cloud, spec.logical
            continue
        local_redrive = json.loads(local["RedrivePolicy"])
        cloud_redrive = cloud["RedrivePolicy"]
        assert int(local_redrive["maxReceiveCount"]) == cloud_redrive["maxReceiveCount"]
        assert (
            by_arn[local_redrive["deadLetterTargetArn"]]
            == by_id[ref_target(cloud_redrive["deadLetterTargetArn"])]
        )


def _keys(schema: list[dict[str, str]]) -> list[tuple[str, str]]:
    return [(k["AttributeName"], k["KeyType"]) for k in schema]


def test_tables_match_keys_indexes_ttl_streams_and_protection(
    synth: Synth, settings: Settings, aws: boto3.session.Session
) -> None:
    ddb = aws.client("dynamodb")
    resources = synth.template(ENV)["Resources"]
    for spec in r.SPEC.tables:
        cloud = resources[template_id(synth, synth.stacks[ENV].state.tables[spec.logical])]["Properties"]
        name = settings.table(spec.logical)
        local = ddb.describe_table(TableName=name)["Table"]
        assert _keys(local["KeySchema"]) == _keys(cloud["KeySchema"])
        assert {(a["AttributeName"], a["AttributeType"]) for a in local["AttributeDefinitions"]} == {
            (a["AttributeName"], a["AttributeType"]) for a in cloud["AttributeDefinitions"]
        }
        local_indexes = {
            i["IndexName"]: (_keys(i["KeySchema"]), i["Projection"]["ProjectionType"])
            for i in local.get("GlobalSecondaryIndexes", [])
        }
        cloud_indexes = {
            i["IndexName"]: (_keys(i["KeySchema"]), i["Projection"]["ProjectionType"])
            for i in cloud.get("GlobalSecondaryIndexes", [])
        }
        assert local_indexes == cloud_indexes, spec.logical
        ttl = ddb.describe_time_to_live(TableName=name)["TimeToLiveDescription"]
        cloud_ttl = cloud.get("TimeToLiveSpecification")
        if cloud_ttl is None:
            assert ttl["TimeToLiveStatus"] == "DISABLED", spec.logical
        else:
            assert ttl["TimeToLiveStatus"] == "ENABLED" and ttl["AttributeName"] == cloud_ttl["AttributeName"]
        local_stream = local.get("StreamSpecification", {})
        cloud_stream = cloud.get("StreamSpecification", {})
        assert local_stream.get("StreamViewType") == cloud_stream.get("StreamViewType"), spec.logical
        assert local["BillingModeSummary"]["BillingMode"] == cloud["BillingMode"]
        assert (local.get("SSEDescription", {}).get("Status") == "ENABLED") is cloud["SSESpecification"][
            "SSEEnabled"
        ]
        backups = ddb.describe_continuous_backups(TableName=name)["ContinuousBackupsDescription"]
        pitr = backups["PointInTimeRecoveryDescription"]["PointInTimeRecoveryStatus"] == "ENABLED"
        assert pitr is cloud["PointInTimeRecoverySpecification"]["PointInTimeRecoveryEnabled"]


def test_bus_and_rules_match_patterns_and_targets(
    synth: Synth, settings: Settings, aws: boto3.session.Session
) -> None:
    events = aws.client("events")
    resources = synth.template(ENV)["Resources"]
    stack = synth.stacks[ENV]
    assert events.describe_event_bus(Name=settings.bus_name)["Name"] == settings.bus_name
    bus_id = template_id(synth, stack.events.bus)
    assert resources[bus_id]["Type"] == "AWS::Events::EventBus"
    by_id = logical_of_queue(synth)
    by_arn = local_queue_of_arn(settings)
    local_rules = {x["Name"]: x for x in events.list_rules(EventBusName=settings.bus_name)["Rules"]}
    assert len(local_rules) == len(r.SPEC.rules) == len(stack.events.rules)
    for spec in r.SPEC.rules:
        cloud = resources[template_id(synth, stack.events.rules[spec.logical])]["Properties"]
        assert ref_target(cloud["EventBusName"]) == bus_id
        local = local_rules[r.local_name("test", spec.logical)]
        assert json.loads(local["EventPattern"]) == cloud["EventPattern"]
        assert local["State"] == cloud["State"]
        local_targets = events.list_targets_by_rule(Rule=local["Name"], EventBusName=settings.bus_name)[
            "Targets"
        ]
        assert [by_arn[t["Arn"]] for t in local_targets] == [
            by_id[ref_target(t["Arn"])] for t in cloud["Targets"]
        ]


def test_schedule_group_topic_and_resources_parameter_exist_on_both_sides(
    synth: Synth, settings: Settings, aws: boto3.session.Session
) -> None:
    assert aws.client("scheduler").get_schedule_group(Name=settings.schedule_group)["State"] == "ACTIVE"
    assert synth.resources(ENV, "AWS::Scheduler::ScheduleGroup")
    assert settings.topic_arn and synth.resources(ENV, "AWS::SNS::Topic")
    local = aws.client("ssm").get_parameter(Name=r.resources_parameter("test"))["Parameter"]
    (cloud,) = synth.resources(ENV, "AWS::SSM::Parameter").values()
    # CloudFormation's JSON leaves out keys whose value is null.
    local_keys = {k for k, v in json.loads(local["Value"]).items() if v is not None}
    assert local_keys == set(json.loads(_placeholder_json(cloud["Properties"]["Value"])))


def _placeholder_json(value: Any) -> str:
    separator, parts = value["Fn::Join"]
    return str(separator).join(p if isinstance(p, str) else "deployed" for p in parts)
