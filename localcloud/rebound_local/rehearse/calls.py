"""What IAM authorizes for one AWS call: the (action, resource ARN) pairs of a botocore call.

Standard library only (loaded into each function's interpreter by ``host.py``). A transaction is
authorized item by item, as IAM does (a ``Put`` is ``dynamodb:PutItem`` on its table); a batch
operation of SQS is authorized as its single form; a schedule that names a role also needs
``iam:PassRole`` on that role.
"""

from __future__ import annotations

import base64
from typing import Any
from urllib.parse import urlparse

PREFIX = {"dynamodbstreams": "dynamodb", "monitoring": "cloudwatch", "appconfigdata": "appconfig"}
SINGLE = {
    "SendMessageBatch": "SendMessage",
    "DeleteMessageBatch": "DeleteMessage",
    "ChangeMessageVisibilityBatch": "ChangeMessageVisibility",
}
TRANSACT_ITEM = {
    "Put": "PutItem",
    "Update": "UpdateItem",
    "Delete": "DeleteItem",
    "ConditionCheck": "ConditionCheckItem",
}
FREE = {("sts", "GetCallerIdentity")}
"""Calls that need no permission."""


class Arns:
    def __init__(self, region: str, account: str, partition: str = "aws") -> None:
        self.region = region
        self.account = account
        self.partition = partition

    def arn(self, service: str, resource: str, *, region: bool = True) -> str:
        return f"arn:{self.partition}:{service}:{self.region if region else ''}:{self.account}:{resource}"

    def table(self, name: str, index: str | None = None) -> str:
        base = name if name.startswith("arn:") else self.arn("dynamodb", f"table/{name}")
        return f"{base}/index/{index}" if index else base

    def queue(self, url: str) -> str:
        if url.startswith("arn:"):
            return url
        parts = urlparse(url).path.strip("/").split("/")
        account = parts[-2] if len(parts) >= 2 else self.account
        return f"arn:{self.partition}:sqs:{self.region}:{account}:{parts[-1]}"

    def bus(self, name: str | None) -> str:
        name = name or "default"
        return name if name.startswith("arn:") else self.arn("events", f"event-bus/{name}")

    def rule(self, name: str, bus: str | None) -> str:
        if name.startswith("arn:"):
            return name
        bus_name = (bus or "default").rsplit("/", 1)[-1]
        return self.arn("events", f"rule/{name}" if bus_name == "default" else f"rule/{bus_name}/{name}")

    def key(self, key_id: str) -> str:
        if key_id.startswith("arn:"):
            return key_id
        if key_id.startswith("alias/"):
            return self.arn("kms", key_id)
        return self.arn("kms", f"key/{key_id}")

    def parameter(self, name: str) -> str:
        return name if name.startswith("arn:") else self.arn("ssm", f"parameter/{name.lstrip('/')}")

    def secret(self, secret_id: str) -> str:
        return (
            secret_id if secret_id.startswith("arn:") else self.arn("secretsmanager", f"secret:{secret_id}")
        )

    def function(self, name: str) -> str:
        if name.startswith("arn:"):
            return name
        return self.arn("lambda", f"function:{name}")


def authorizations(service: str, operation: str, params: dict[str, Any], arns: Arns) -> list[tuple[str, str]]:
    """The (IAM action, resource ARN) pairs that must all be allowed for this call."""
    if (service, operation) in FREE:
        return []
    prefix = PREFIX.get(service, service)
    if service == "dynamodb":
        return _dynamodb(operation, params, arns)
    if service == "dynamodbstreams":
        stream = params.get("StreamArn")
        return [(f"dynamodb:{operation}", str(stream) if stream else "*")]
    if service == "sqs":
        if operation == "GetQueueUrl":
            return [("sqs:GetQueueUrl", arns.arn("sqs", str(params["QueueName"])))]
        if "QueueUrl" not in params:
            return [(f"sqs:{operation}", "*")]
        return [(f"sqs:{SINGLE.get(operation, operation)}", arns.queue(str(params["QueueUrl"])))]
    if service == "scheduler":
        if operation in ("ListSchedules", "ListScheduleGroups"):
            return [(f"scheduler:{operation}", "*")]
        group = params.get("GroupName") or "default"
        if "Name" in params and "Schedule" in operation:
            out = [(f"scheduler:{operation}", arns.arn("scheduler", f"schedule/{group}/{params['Name']}"))]
            role = (params.get("Target") or {}).get("RoleArn")
            if role and operation in ("CreateSchedule", "UpdateSchedule"):
                out.append(("iam:PassRole", str(role)))
            return out
        return [
            (f"scheduler:{operation}", arns.arn("scheduler", f"schedule-group/{params.get('Name', group)}"))
        ]
    if service == "events":
        if operation == "PutEvents":
            buses = {str(e.get("EventBusName") or "default") for e in params.get("Entries", [])}
            return [("events:PutEvents", arns.bus(b)) for b in sorted(buses)]
        rule = params.get("Rule") or params.get("Name")
        if (rule and "Rule" in operation) or operation in (
            "PutTargets",
            "RemoveTargets",
            "ListTargetsByRule",
        ):
            return [(f"events:{operation}", arns.rule(str(rule), params.get("EventBusName")))]
        return [(f"events:{operation}", "*")]
    if service == "sns":
        topic = params.get("TopicArn") or params.get("TargetArn")
        return [(f"sns:{operation}", str(topic) if topic else "*")]
    if service == "kms":
        key = params.get("KeyId")
        return [(f"kms:{operation}", arns.key(str(key)) if key else "*")]
    if service == "ssm":
        if "Name" in params:
            return [(f"ssm:{operation}", arns.parameter(str(params["Name"])))]
        return [(f"ssm:{operation}", "*")]
    if service == "secretsmanager":
        secret = params.get("SecretId")
        return [(f"secretsmanager:{operation}", arns.secret(str(secret)) if secret else "*")]
    if service == "lambda":
        action = "InvokeFunction" if operation == "Invoke" else operation
        name = params.get("FunctionName")
        return [(f"lambda:{action}", arns.function(str(name)) if name else "*")]
    if service in ("appconfig", "appconfigdata"):
        return _appconfig(operation, params, arns)
    if service == "s3":
        bucket = f"arn:{arns.partition}:s3:::{params.get('Bucket', '*')}"
        if operation in ("ListObjectsV2", "ListObjects"):
            return [("s3:ListBucket", bucket)]
        if "Key" in params:
            return [(f"s3:{operation}", f"{bucket}/{params['Key']}")]
        return [(f"s3:{operation}", bucket)]
    if service == "sts":
        if operation == "AssumeRole":
            out = [("sts:AssumeRole", str(params["RoleArn"]))]
            if params.get("Tags"):
                out.append(("sts:TagSession", str(params["RoleArn"])))
            return out
        return [(f"sts:{operation}", "*")]
    return [(f"{prefix}:{operation}", "*")]


def configuration_read(params: dict[str, Any]) -> dict[str, Any]:
    """``GetLatestConfiguration``'s parameters with the ids its token reads, where the token is the
    local cloud's (``motopatch.appconfig_service``: ``<application>/<environment>/<profile>/<n>``)."""
    try:
        raw = base64.urlsafe_b64decode(str(params.get("ConfigurationToken", "")).encode()).decode()
        app, env, profile, _ = raw.split("/")
    except (ValueError, UnicodeDecodeError):
        return params
    return {**params, "ApplicationId": app, "EnvironmentId": env, "ConfigurationProfileId": profile}


def _appconfig(operation: str, params: dict[str, Any], arns: Arns) -> list[tuple[str, str]]:
    """AppConfig's calls on the feature flags. A read names its configuration by its session's
    token: the local cloud's tokens carry the ids they read (``motopatch.appconfig_service``)."""
    app = params.get("ApplicationId") or params.get("ApplicationIdentifier")
    env = params.get("EnvironmentId") or params.get("EnvironmentIdentifier")
    profile = params.get("ConfigurationProfileId") or params.get("ConfigurationProfileIdentifier")
    if operation == "GetLatestConfiguration" and not app:
        params = configuration_read(params)
        app, env, profile = (
            params.get(k) for k in ("ApplicationId", "EnvironmentId", "ConfigurationProfileId")
        )
        if not app:
            return [("appconfig:GetLatestConfiguration", "*")]
    if operation in ("StartConfigurationSession", "GetLatestConfiguration"):
        resource = f"application/{app}/environment/{env}/configuration/{profile}"
        return [(f"appconfig:{operation}", arns.arn("appconfig", resource))]
    if operation == "StartDeployment":
        return [
            ("appconfig:StartDeployment", arns.arn("appconfig", f"application/{app}/environment/{env}")),
            (
                "appconfig:StartDeployment",
                arns.arn("appconfig", f"application/{app}/configurationprofile/{profile}"),
            ),
            (
                "appconfig:StartDeployment",
                arns.arn("appconfig", f"deploymentstrategy/{params.get('DeploymentStrategyId')}"),
            ),
        ]
    if profile:
        resource = f"application/{app}/configurationprofile/{profile}"
    elif env:
        resource = f"application/{app}/environment/{env}"
    else:
        resource = f"application/{app}" if app else "*"
    return [(f"appconfig:{operation}", arns.arn("appconfig", resource) if resource != "*" else "*")]


def _dynamodb(operation: str, params: dict[str, Any], arns: Arns) -> list[tuple[str, str]]:
    if operation == "TransactWriteItems":
        return [
            (f"dynamodb:{TRANSACT_ITEM[kind]}", arns.table(str(body["TableName"])))
            for item in params["TransactItems"]
            for kind, body in item.items()
        ]
    if operation == "TransactGetItems":
        return [("dynamodb:GetItem", arns.table(str(i["Get"]["TableName"]))) for i in params["TransactItems"]]
    if operation.startswith("Batch"):
        return [(f"dynamodb:{operation}", arns.table(str(name))) for name in params["RequestItems"]]
    if "TableName" in params:
        return [(f"dynamodb:{operation}", arns.table(str(params["TableName"]), params.get("IndexName")))]
    return [(f"dynamodb:{operation}", "*")]
