"""Create Rebound's resources on the local cloud from ``rebound.resources.SPEC``.

The CDK stack builds from the same spec; ``tests/infra/test_one_definition.py`` compares what
this creates with the synthesized template. Provisioning is idempotent: running it again on a
restored state finds what exists and creates what is missing.
"""

from __future__ import annotations

import json
import secrets
import weakref
from typing import Any

import boto3
from botocore.exceptions import ClientError

from rebound import resources as r
from rebound.config.loader import load_policy_book
from rebound.domain.approvals import ApprovalRules
from rebound.domain.flags import DEFAULTS, flags_document
from rebound.domain.retention import Retention
from rebound.domain.target_specs import TargetRules
from rebound.settings import QueueRef, Settings, default_config_dir, resources_document
from rebound_local.motopatch.kms_material import LOCAL_AUDIT_KEY

LOCAL_IDENTITIES: dict[str, list[str]] = {"*": ["*"]}
"""The local cloud's identities -> tenants: every caller an administrator (tests narrow it)."""

REGION = "us-east-1"
ACCOUNT = "123456789012"


def table_args(spec: r.TableSpec, name: str, keep_indexes: tuple[str, ...] = ()) -> dict[str, Any]:
    """``CreateTable``'s arguments for ``spec`` (with the retired indexes ``keep_indexes`` names)."""
    keys = [spec.partition] + ([spec.sort] if spec.sort else [])
    attrs: dict[str, str] = {k.name: k.type for k in keys}
    for index in spec.built_indexes(keep_indexes):
        attrs[index.partition.name] = index.partition.type
        if index.sort:
            attrs[index.sort.name] = index.sort.type
    args: dict[str, Any] = {
        "TableName": name,
        "BillingMode": "PAY_PER_REQUEST",
        "AttributeDefinitions": [{"AttributeName": n, "AttributeType": t} for n, t in attrs.items()],
        "KeySchema": [{"AttributeName": spec.partition.name, "KeyType": "HASH"}]
        + ([{"AttributeName": spec.sort.name, "KeyType": "RANGE"}] if spec.sort else []),
        "SSESpecification": {"Enabled": True},
    }
    if spec.indexes:
        args["GlobalSecondaryIndexes"] = [
            {
                "IndexName": i.name,
                "KeySchema": [{"AttributeName": i.partition.name, "KeyType": "HASH"}]
                + ([{"AttributeName": i.sort.name, "KeyType": "RANGE"}] if i.sort else []),
                "Projection": {"ProjectionType": i.projection},
            }
            for i in spec.built_indexes(keep_indexes)
        ]
    if spec.stream:
        args["StreamSpecification"] = {"StreamEnabled": True, "StreamViewType": spec.stream}
    return args


def queue_attributes(spec: r.QueueSpec, arns: dict[str, str]) -> dict[str, str]:
    attrs = {
        "VisibilityTimeout": str(spec.visibility_timeout_s),
        "MessageRetentionPeriod": str(spec.retention_s),
        "ReceiveMessageWaitTimeSeconds": str(spec.receive_wait_s),
        "SqsManagedSseEnabled": "true",
    }
    if spec.dead_letter:
        attrs["RedrivePolicy"] = json.dumps(
            {"deadLetterTargetArn": arns[spec.dead_letter], "maxReceiveCount": spec.max_receive_count}
        )
    return attrs


def event_pattern(rule: r.RuleSpec, source: str) -> dict[str, Any]:
    return {"source": [source], "detail-type": list(rule.detail_types)}


def aws_sized_name(env: str, logical: str) -> str:
    """A name of the shape and length CloudFormation generates for the stack's resource
    (``Rebound-<env>-<construct path and hash>-<13 characters>``): items that carry names then
    have their AWS size."""
    from rebound_local.rehearse.template import generated_name, suffix

    return generated_name(f"Rebound-{env}", f"State{camel(logical)}{suffix(logical, 8)}", 80)


def camel(logical: str) -> str:
    """``dlq_messages`` -> ``DlqMessages``, as a construct path names it."""
    return "".join(part.capitalize() for part in logical.split("_"))


def audit_key_id(kms: Any, env: str, *, arn: bool = False) -> str:
    """The local cloud's KMS HMAC key that keys the audit chain (``HMAC_256``, as on AWS), named by
    its alias, created on first use. Records name the alias, and the key's material follows from
    its description (``motopatch.kms_material``), so a restart's new key checks the old records.
    With ``arn``, records name the key by its ARN, as on AWS (75 characters; a restart's new key
    would not check them)."""
    alias = f"alias/{r.local_name(env, 'audit')}"
    try:
        found = kms.describe_key(KeyId=alias)["KeyMetadata"]
        return str(found["Arn"]) if arn else alias
    except ClientError as exc:
        if exc.response["Error"]["Code"] != "NotFoundException":
            raise
    meta = kms.create_key(
        KeySpec="HMAC_256", KeyUsage="GENERATE_VERIFY_MAC", Description=f"{LOCAL_AUDIT_KEY} {alias}"
    )["KeyMetadata"]
    kms.create_alias(AliasName=alias, TargetKeyId=meta["KeyId"])
    return str(meta["Arn"]) if arn else alias


def provision(
    session: boto3.session.Session, endpoint_url: str | None, env: str = "local", *, aws_sized: bool = False
) -> Settings:
    """Create the resources; with ``aws_sized``, under names of AWS's length and with the audit
    key named by its ARN (``make bench``'s cost figures)."""
    names = aws_sized_name if aws_sized else r.local_name
    kw: dict[str, Any] = {"region_name": REGION}
    if endpoint_url:
        kw["endpoint_url"] = endpoint_url
    ddb = _client(session, "dynamodb", kw)
    sqs = _client(session, "sqs", kw)
    events = _client(session, "events", kw)
    scheduler = _client(session, "scheduler", kw)
    sns = _client(session, "sns", kw)
    iam = _client(session, "iam", kw)
    ssm = _client(session, "ssm", kw)
    kms = _client(session, "kms", kw)

    tables: dict[str, str] = {}
    existing_tables = set(ddb.list_tables().get("TableNames", []))
    for spec in r.SPEC.tables:
        name = names(env, spec.logical)
        tables[spec.logical] = name
        if name in existing_tables:
            continue
        ddb.create_table(**table_args(spec, name))
        if spec.ttl_attribute:
            ddb.update_time_to_live(
                TableName=name, TimeToLiveSpecification={"Enabled": True, "AttributeName": spec.ttl_attribute}
            )
        ddb.update_continuous_backups(
            TableName=name, PointInTimeRecoverySpecification={"PointInTimeRecoveryEnabled": True}
        )

    queues: dict[str, QueueRef] = {}
    arns: dict[str, str] = {}
    # Dead-letter queues first: their ARNs go into the redrive policies.
    ordered = sorted(r.SPEC.queues, key=lambda q: q.dead_letter is not None)
    for queue_spec in ordered:
        name = names(env, queue_spec.logical)
        attributes: Any = queue_attributes(queue_spec, arns)
        url = sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        arns[queue_spec.logical] = arn
        queues[queue_spec.logical] = QueueRef(url=url, arn=arn, name=name)

    bus = names(env, r.SPEC.bus_logical)
    try:
        events.create_event_bus(Name=bus)
    except ClientError as exc:
        if exc.response["Error"]["Code"] != "ResourceAlreadyExistsException":
            raise
    for rule in r.SPEC.rules:
        rule_name = r.local_name(env, rule.logical)
        events.put_rule(
            Name=rule_name,
            EventBusName=bus,
            EventPattern=json.dumps(event_pattern(rule, r.SPEC.event_source)),
            State="ENABLED",
            Description=rule.purpose,
        )
        events.put_targets(
            Rule=rule_name, EventBusName=bus, Targets=[{"Id": rule.queue, "Arn": arns[rule.queue]}]
        )

    group = names(env, r.SPEC.schedule_group_logical)
    try:
        scheduler.create_schedule_group(Name=group)
    except ClientError as exc:
        if exc.response["Error"]["Code"] != "ConflictException":
            raise

    role_name = r.local_name(env, "scheduler-role")
    trust = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"Service": "scheduler.amazonaws.com"},
                "Action": "sts:AssumeRole",
            }
        ],
    }
    try:
        role_arn = iam.create_role(RoleName=role_name, AssumeRolePolicyDocument=json.dumps(trust))["Role"][
            "Arn"
        ]
    except ClientError as exc:
        if exc.response["Error"]["Code"] != "EntityAlreadyExists":
            raise
        role_arn = iam.get_role(RoleName=role_name)["Role"]["Arn"]

    audit_key = audit_key_id(kms, env, arn=aws_sized)
    # S3 bucket names are lower case, at most 63 characters (CloudFormation's are too).
    bucket = names(env, r.SPEC.archive_bucket_logical).lower().replace("_", "-")[:63]
    s3 = _client(session, "s3", kw)
    try:
        s3.create_bucket(Bucket=bucket)
    except ClientError as exc:
        if exc.response["Error"]["Code"] not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
            raise
    topic_arn = sns.create_topic(Name=names(env, r.SPEC.topic_logical))["TopicArn"]
    completion_key = completion_key_parameter(ssm, env)
    flags = flags_location(_client(session, "appconfig", kw), ssm, env)

    settings = Settings(
        environment=env,
        tables=tables,
        queues=queues,
        bus_name=bus,
        schedule_group=group,
        scheduler_role_arn=role_arn,
        topic_arn=topic_arn,
        event_source=r.SPEC.event_source,
        audit_key_id=audit_key,
        config_dir=default_config_dir(),
        deployed_policies=tuple(load_policy_book(default_config_dir()).names()),
        completion_key=completion_key,
        flags=flags,
        # The local cloud is local whatever its name: sim, and the loopback test servers over http.
        targets=TargetRules.defaults_for("local"),
        # Whoever runs the local cloud is an administrator on their own machine.
        identities=LOCAL_IDENTITIES,
        # Four eyes on critical runs as everywhere; redrives of any size by one operator (the
        # simulator and the tests redrive thousands; tests of the rule set it themselves).
        approvals=ApprovalRules(redrive_over=None),
        retention=Retention(),
        archive_bucket=bucket,
    )
    ssm.put_parameter(
        Name=r.resources_parameter(env),
        Value=json.dumps(resources_document(settings)),
        Type="String",
        Overwrite=True,
    )
    return settings


_CLIENTS: weakref.WeakKeyDictionary[Any, dict[tuple[str, str], Any]] = weakref.WeakKeyDictionary()


def _client(session: Any, service: str, kw: dict[str, Any]) -> Any:
    """``session``'s client of ``service``, made once per session and endpoint (a botocore client
    takes milliseconds to make, and every test's environment is provisioned anew)."""
    per_session = _CLIENTS.setdefault(session, {})
    key = (service, repr(sorted(kw.items())))
    if key not in per_session:
        per_session[key] = session.client(service, **kw)
    return per_session[key]


def flags_location(appconfig: Any, ssm: Any, env: str) -> str:
    """The environment's feature flags (``rebound.domain.flags``), as the stack creates them
    (``rebound_infra.constructs.flags``): an AppConfig application, an environment, a profile
    holding every flag at its default, a strategy that deploys at once and the first deployment.
    Created once; their ids are kept in an SSM parameter (moto cannot list applications)."""
    name = f"/rebound/{env}/flags-location"
    try:
        return str(ssm.get_parameter(Name=name)["Parameter"]["Value"])
    except ClientError as exc:
        if exc.response["Error"]["Code"] != "ParameterNotFound":
            raise
    app = appconfig.create_application(Name=f"{r.local_name(env, 'app')}-flags")["Id"]
    environment = appconfig.create_environment(ApplicationId=app, Name=env)["Id"]
    profile = appconfig.create_configuration_profile(
        ApplicationId=app, Name="flags", LocationUri="hosted", Type="AWS.Freeform"
    )["Id"]
    version = appconfig.create_hosted_configuration_version(
        ApplicationId=app,
        ConfigurationProfileId=profile,
        Content=json.dumps(flags_document(DEFAULTS), sort_keys=True).encode(),
        ContentType="application/json",
    )["VersionNumber"]
    strategy = appconfig.create_deployment_strategy(
        Name=f"{r.local_name(env, 'app')}-flags-at-once",
        DeploymentDurationInMinutes=0,
        GrowthFactor=100,
        FinalBakeTimeInMinutes=0,
        ReplicateTo="NONE",
    )["Id"]
    appconfig.start_deployment(
        ApplicationId=app,
        EnvironmentId=environment,
        DeploymentStrategyId=strategy,
        ConfigurationProfileId=profile,
        ConfigurationVersion=str(version),
    )
    location = f"appconfig:{app}:{environment}:{profile}:{strategy}"
    ssm.put_parameter(Name=name, Value=location, Type="String", Overwrite=True)
    return location


def completion_key_parameter(ssm: Any, env: str) -> str:
    """The environment's completion key (signs asynchronous attempts' tokens): a random SSM
    ``SecureString``, kept if it exists (tokens already issued stay valid). On AWS the stack
    creates a generated Secrets Manager secret instead."""
    name = r.completion_key_parameter(env)
    try:
        ssm.put_parameter(Name=name, Value=secrets.token_urlsafe(48), Type="SecureString", Overwrite=False)
    except ClientError as exc:
        if exc.response["Error"]["Code"] != "ParameterAlreadyExists":
            raise
    return name
