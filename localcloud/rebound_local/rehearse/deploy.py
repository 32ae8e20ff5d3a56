"""Deploy a synthesized template to the local cloud, as CloudFormation would.

Tables (keys, indexes, projections, streams, TTL), queues (redrive policies, visibility timeouts,
retention), the bus and its rules with their targets, the schedule group, the topic, the KMS keys,
the generated secret, the SSM parameters and the feature flags' AppConfig resources are created in
moto from the template's own properties, under AWS-shaped names (``template``). Lambda functions,
their event source mappings and the sweeper's schedule are played by the local runtime with the
template's settings; roles and policies by the IAM evaluator (``iam``). Every other resource type
is listed as not played.
"""

from __future__ import annotations

import json
import secrets
import string
from dataclasses import dataclass, field, replace
from typing import Any

from rebound import resources as r
from rebound.settings import Settings, settings_from_document
from rebound_local.rehearse.template import (
    REGION,
    FunctionDeploy,
    Physical,
    Template,
    TemplateError,
    generated_name,
    suffix,
)

CREATED = "created in the local cloud"
RUNTIME = "played by the local runtime"
EVALUATED = "evaluated by the rehearsal's IAM check"
BUNDLE = "played by the built bundle"
PLAYED = {
    "AWS::DynamoDB::Table": CREATED,
    "AWS::SQS::Queue": CREATED,
    "AWS::S3::Bucket": CREATED,
    "AWS::Events::EventBus": CREATED,
    "AWS::Events::Rule": CREATED,
    "AWS::Scheduler::ScheduleGroup": CREATED,
    "AWS::SNS::Topic": CREATED,
    "AWS::KMS::Key": CREATED,
    "AWS::SecretsManager::Secret": CREATED,
    "AWS::SSM::Parameter": CREATED,
    "AWS::AppConfig::Application": CREATED,
    "AWS::AppConfig::Environment": CREATED,
    "AWS::AppConfig::ConfigurationProfile": CREATED,
    "AWS::AppConfig::HostedConfigurationVersion": CREATED,
    "AWS::AppConfig::DeploymentStrategy": CREATED,
    "AWS::AppConfig::Deployment": CREATED,
    "AWS::Lambda::Function": RUNTIME,
    "AWS::Lambda::EventSourceMapping": RUNTIME,
    "AWS::Scheduler::Schedule": RUNTIME,
    "AWS::Lambda::LayerVersion": BUNDLE,
    "AWS::IAM::Role": EVALUATED,
    "AWS::IAM::Policy": EVALUATED,
}


@dataclass
class Deployed:
    template: Template
    settings: Settings
    functions: dict[str, FunctionDeploy]
    specs: tuple[r.FunctionSpec, ...]
    """``rebound.resources``' functions with the template's timeouts, memory and mappings."""
    key_policies: dict[str, list[dict[str, Any]]]
    coverage: dict[str, list[str]] = field(default_factory=dict)
    """How each resource type of the template is played -> its types; ``not played`` included."""


def _tags(props: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in props.items() if k != "Tags"}


def deploy(template: Template, session: Any, endpoint_url: str | None, environment: str) -> Deployed:
    kw: dict[str, Any] = {"region_name": REGION}
    if endpoint_url:
        kw["endpoint_url"] = endpoint_url
    client = {
        s: session.client(s, **kw)
        for s in (
            "dynamodb",
            "sqs",
            "events",
            "scheduler",
            "sns",
            "kms",
            "ssm",
            "secretsmanager",
            "appconfig",
            "s3",
        )
    }
    stack = template.stack_name

    for logical_id in template.of_type("AWS::S3::Bucket"):
        client["s3"].create_bucket(Bucket=template.physical_of(logical_id).ref)

    for logical_id in template.of_type("AWS::KMS::Key"):
        props = template.props(logical_id)
        args: dict[str, Any] = {"Description": str(props.get("Description", ""))}
        if props.get("KeySpec"):
            args["KeySpec"] = props["KeySpec"]
        if props.get("KeyUsage"):
            args["KeyUsage"] = props["KeyUsage"]
        meta = client["kms"].create_key(**args)["KeyMetadata"]
        template.set_physical(
            logical_id, Physical(meta["KeyId"], {"Arn": meta["Arn"], "KeyId": meta["KeyId"]})
        )

    for logical_id in template.of_type("AWS::SecretsManager::Secret"):
        props = template.props(logical_id)
        generate = props.get("GenerateSecretString") or {}
        alphabet = string.ascii_letters + string.digits
        value = props.get("SecretString") or "".join(
            secrets.choice(alphabet) for _ in range(int(generate.get("PasswordLength", 32)))
        )
        name = str(props.get("Name") or f"{logical_id}-{suffix(logical_id, 12)}")
        arn = client["secretsmanager"].create_secret(Name=name, SecretString=str(value))["ARN"]
        template.set_physical(logical_id, Physical(arn, {"Id": arn}))

    for logical_id in template.of_type("AWS::DynamoDB::Table"):
        props = template.resolve(_tags(template.props(logical_id)))
        name = template.physical_of(logical_id).ref
        args = {
            "TableName": name,
            "AttributeDefinitions": props["AttributeDefinitions"],
            "KeySchema": props["KeySchema"],
            "BillingMode": props.get("BillingMode", "PROVISIONED"),
        }
        if props.get("ProvisionedThroughput"):
            args["ProvisionedThroughput"] = props["ProvisionedThroughput"]
        if props.get("GlobalSecondaryIndexes"):
            args["GlobalSecondaryIndexes"] = props["GlobalSecondaryIndexes"]
        if props.get("StreamSpecification"):
            args["StreamSpecification"] = {"StreamEnabled": True, **props["StreamSpecification"]}
        if props.get("SSESpecification"):
            args["SSESpecification"] = {"Enabled": bool(props["SSESpecification"].get("SSEEnabled"))}
        description = client["dynamodb"].create_table(**args)["TableDescription"]
        ttl = props.get("TimeToLiveSpecification")
        if ttl and ttl.get("Enabled"):
            client["dynamodb"].update_time_to_live(
                TableName=name,
                TimeToLiveSpecification={"Enabled": True, "AttributeName": ttl["AttributeName"]},
            )
        attributes = {"Arn": description["TableArn"]}
        if description.get("LatestStreamArn"):
            attributes["StreamArn"] = description["LatestStreamArn"]
        template.set_physical(logical_id, Physical(name, attributes))

    queues = template.of_type("AWS::SQS::Queue")
    for logical_id in sorted(queues, key=lambda q: "RedrivePolicy" in template.props(q)):
        props = template.resolve(_tags(template.props(logical_id)))
        props.pop("QueueName", None)
        name = template.physical_of(logical_id).attributes["QueueName"]
        attributes = {
            k: json.dumps(v) if isinstance(v, dict) else str(v).lower() if isinstance(v, bool) else str(v)
            for k, v in props.items()
        }
        client["sqs"].create_queue(QueueName=name, Attributes=attributes)

    for logical_id in template.of_type("AWS::SNS::Topic"):
        name = template.physical_of(logical_id).attributes["TopicName"]
        arn = client["sns"].create_topic(Name=name)["TopicArn"]
        template.set_physical(logical_id, Physical(arn, {"TopicArn": arn, "TopicName": name}))

    for logical_id in template.of_type("AWS::Events::EventBus"):
        client["events"].create_event_bus(Name=template.physical_of(logical_id).ref)
    for logical_id in template.of_type("AWS::Events::Rule"):
        props = template.resolve(_tags(template.props(logical_id)))
        bus = str(props.get("EventBusName") or "default")
        name = str(props.get("Name") or generated_name(stack, logical_id, 64))
        rule: dict[str, Any] = {"Name": name, "EventBusName": bus, "State": props.get("State", "ENABLED")}
        if props.get("EventPattern"):
            rule["EventPattern"] = json.dumps(props["EventPattern"])
        if props.get("ScheduleExpression"):
            rule["ScheduleExpression"] = props["ScheduleExpression"]
        arn = client["events"].put_rule(**rule)["RuleArn"]
        targets = [
            {
                k: v
                for k, v in t.items()
                if k in ("Id", "Arn", "Input", "InputPath", "RoleArn", "DeadLetterConfig", "RetryPolicy")
            }
            for t in props.get("Targets", [])
        ]
        if targets:
            client["events"].put_targets(Rule=name, EventBusName=bus, Targets=targets)
        template.set_physical(logical_id, Physical(f"{bus}|{name}", {"Arn": arn}))

    for logical_id in template.of_type("AWS::Scheduler::ScheduleGroup"):
        client["scheduler"].create_schedule_group(Name=template.physical_of(logical_id).ref)

    for logical_id in template.of_type("AWS::SSM::Parameter"):
        props = template.resolve(_tags(template.props(logical_id)))
        name = template.physical_of(logical_id).ref
        client["ssm"].put_parameter(
            Name=name, Value=str(props["Value"]), Type=str(props.get("Type", "String")), Overwrite=True
        )

    _appconfig(template, client["appconfig"])

    functions = template.functions()
    document = template.resources_document(environment)
    settings = settings_from_document(document)
    coverage: dict[str, list[str]] = {}
    for kind in sorted({v["Type"] for v in template.resources.values()}):
        coverage.setdefault(PLAYED.get(kind, "not played"), []).append(kind)
    return Deployed(
        template=template,
        settings=settings,
        functions=functions,
        specs=tuple(_specs(template, functions, settings)),
        key_policies=template.key_policies(),
        coverage=coverage,
    )


def _appconfig(template: Template, appconfig: Any) -> None:
    """The feature flags' AppConfig resources, in the order their references need."""
    for logical_id in template.of_type("AWS::AppConfig::Application"):
        props = template.resolve(_tags(template.props(logical_id)))
        app = appconfig.create_application(Name=str(props["Name"]))["Id"]
        template.set_physical(logical_id, Physical(app, {"ApplicationId": app}))
    for logical_id in template.of_type("AWS::AppConfig::Environment"):
        props = template.resolve(_tags(template.props(logical_id)))
        env = appconfig.create_environment(ApplicationId=props["ApplicationId"], Name=str(props["Name"]))[
            "Id"
        ]
        template.set_physical(logical_id, Physical(env, {"EnvironmentId": env}))
    for logical_id in template.of_type("AWS::AppConfig::ConfigurationProfile"):
        props = template.resolve(_tags(template.props(logical_id)))
        profile = appconfig.create_configuration_profile(
            ApplicationId=props["ApplicationId"],
            Name=str(props["Name"]),
            LocationUri=str(props["LocationUri"]),
            Type=str(props.get("Type", "AWS.Freeform")),
        )["Id"]
        template.set_physical(logical_id, Physical(profile, {"ConfigurationProfileId": profile}))
    for logical_id in template.of_type("AWS::AppConfig::HostedConfigurationVersion"):
        props = template.resolve(template.props(logical_id))
        version = appconfig.create_hosted_configuration_version(
            ApplicationId=props["ApplicationId"],
            ConfigurationProfileId=props["ConfigurationProfileId"],
            Content=str(props["Content"]).encode(),
            ContentType=str(props["ContentType"]),
        )["VersionNumber"]
        template.set_physical(logical_id, Physical(str(version), {"VersionNumber": str(version)}))
    for logical_id in template.of_type("AWS::AppConfig::DeploymentStrategy"):
        props = template.resolve(_tags(template.props(logical_id)))
        strategy = appconfig.create_deployment_strategy(
            Name=str(props["Name"]),
            DeploymentDurationInMinutes=int(props["DeploymentDurationInMinutes"]),
            GrowthFactor=float(props["GrowthFactor"]),
            FinalBakeTimeInMinutes=int(props.get("FinalBakeTimeInMinutes", 0)),
            ReplicateTo=str(props["ReplicateTo"]),
        )["Id"]
        template.set_physical(logical_id, Physical(strategy, {"Id": strategy}))
    for logical_id in template.of_type("AWS::AppConfig::Deployment"):
        props = template.resolve(_tags(template.props(logical_id)))
        appconfig.start_deployment(
            ApplicationId=props["ApplicationId"],
            EnvironmentId=props["EnvironmentId"],
            DeploymentStrategyId=props["DeploymentStrategyId"],
            ConfigurationProfileId=props["ConfigurationProfileId"],
            ConfigurationVersion=str(props["ConfigurationVersion"]),
        )


def _specs(
    template: Template, functions: dict[str, FunctionDeploy], settings: Settings
) -> list[r.FunctionSpec]:
    """Each function's spec as the template deploys it: timeout, memory, and its triggers."""
    queue_by_arn = {ref.arn: logical for logical, ref in settings.queues.items()}
    table_by_stream = {
        template.physical_of(k).attributes.get("StreamArn"): logical
        for k in template.of_type("AWS::DynamoDB::Table")
        for logical, name in settings.tables.items()
        if template.physical_of(k).ref == name
    }
    scheduled = {
        str(template.resolve(v["Properties"]["Target"]["Arn"]))
        for v in template.of_type("AWS::Scheduler::Schedule").values()
    }
    out = []
    for spec in r.SPEC.functions:
        deployed = functions.get(spec.logical)
        if deployed is None:
            raise TemplateError(
                f"the template deploys no {spec.logical} function "
                f"(no POWERTOOLS_SERVICE_NAME {r.service_name(spec.logical)})"
            )
        queue, stream, batch, maximum, window = None, None, spec.batch_size, None, 0
        for mapping in template.of_type("AWS::Lambda::EventSourceMapping").values():
            props = mapping["Properties"]
            if props.get("FunctionName") != {"Ref": deployed.logical_id}:
                continue
            source = str(template.resolve(props["EventSourceArn"]))
            batch = int(props.get("BatchSize", 10))
            maximum = (props.get("ScalingConfig") or {}).get("MaximumConcurrency")
            window = int(props.get("MaximumBatchingWindowInSeconds", 0))
            queue = queue_by_arn.get(source, queue)
            stream = table_by_stream.get(source, stream)
        out.append(
            replace(
                spec,
                handler=deployed.handler,
                timeout_s=deployed.timeout_s,
                memory_mb=deployed.memory_mb,
                queue=queue,
                batch_size=batch,
                max_concurrency=int(maximum) if maximum else None,
                stream_table=stream,
                batch_window_s=window,
                every_minute=deployed.arn in scheduled,
            )
        )
    return out
