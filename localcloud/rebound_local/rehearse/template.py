"""A synthesized CloudFormation template, read as CloudFormation would deploy it.

``Template`` resolves the intrinsic functions the stack uses (``Ref``, ``Fn::GetAtt``,
``Fn::Join``, ``Fn::Sub``, ``Fn::Select``, ``Fn::Split``, the pseudo parameters) against physical
names of AWS's own shape and length: ``<stack>-<logical id>-<13 characters>`` for the names
CloudFormation generates, 12-digit account ids, full ARNs (a KMS key's ARN is 75 characters). The
names are derived from the logical ids, so two reads of one template name everything alike.
"""

from __future__ import annotations

import hashlib
import json
import os
import string
import subprocess
import sys
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rebound import resources as r

ACCOUNT = "123456789012"
REGION = "us-east-1"
PARTITION = "aws"
SUFFIX_CHARS = string.ascii_uppercase + string.digits
REPO_ROOT = Path(__file__).resolve().parents[3]


class TemplateError(ValueError):
    pass


def suffix(logical_id: str, length: int = 13) -> str:
    """CloudFormation's random part of a generated name, here derived from the logical id."""
    digest = hashlib.sha256(logical_id.encode()).digest()
    return "".join(SUFFIX_CHARS[b % len(SUFFIX_CHARS)] for b in digest[:length])


def generated_name(stack: str, logical_id: str, limit: int) -> str:
    """``<stack>-<logical id>-<suffix>``, the logical id cut so the whole fits ``limit``."""
    tail = suffix(logical_id)
    room = limit - len(stack) - len(tail) - 2
    return f"{stack}-{logical_id[: max(room, 1)]}-{tail}"


@dataclass
class Physical:
    """What ``Ref`` and ``Fn::GetAtt`` give for one resource."""

    ref: str
    attributes: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class FunctionDeploy:
    """One ``AWS::Lambda::Function`` as deployed: its spec's name and what the template gives it."""

    logical_id: str
    logical: str
    """The function's name in ``rebound.resources`` (from its ``POWERTOOLS_SERVICE_NAME``)."""
    name: str
    arn: str
    handler: str
    runtime: str
    timeout_s: int
    memory_mb: int
    environment: dict[str, str]
    role_arn: str
    statements: tuple[dict[str, Any], ...]
    code_path: Path | None
    """The code asset's directory in the cloud assembly (``aws:asset:path``, or the one staged
    under the name of its S3 key), if known."""


class Template:
    def __init__(self, body: dict[str, Any], stack_name: str, asset_dir: Path | None = None) -> None:
        self.body = body
        self.stack_name = stack_name
        self.asset_dir = asset_dir
        self.resources: dict[str, dict[str, Any]] = body.get("Resources", {})
        self.physical: dict[str, Physical] = {}

    @classmethod
    def load(cls, path: Path) -> Template:
        try:
            body = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise TemplateError(f"{path}: not a readable JSON template ({exc})") from None
        stack = path.name.removesuffix(".template.json")
        return cls(body, stack, path.parent)

    # ------------------------------------------------------------------ what is in it
    def of_type(self, kind: str) -> dict[str, dict[str, Any]]:
        return {k: v for k, v in self.resources.items() if v.get("Type") == kind}

    def props(self, logical_id: str) -> dict[str, Any]:
        return dict(self.resources[logical_id].get("Properties") or {})

    # ------------------------------------------------------------------ names
    def physical_of(self, logical_id: str) -> Physical:
        found = self.physical.get(logical_id)
        if found is None:
            found = self._default_physical(logical_id)
            self.physical[logical_id] = found
        return found

    def _default_physical(self, logical_id: str) -> Physical:
        resource = self.resources.get(logical_id)
        if resource is None:
            raise TemplateError(f"the template names {logical_id!r}, which it does not define")
        kind = resource["Type"]
        props = resource.get("Properties") or {}
        stack = self.stack_name

        def arn(service: str, rest: str, *, region: bool = True) -> str:
            return f"arn:{PARTITION}:{service}:{REGION if region else ''}:{ACCOUNT}:{rest}"

        if kind == "AWS::IAM::Role":
            name = generated_name(stack, logical_id, 64)
            return Physical(
                name,
                {"Arn": arn("iam", f"role/{name}", region=False), "RoleId": "AROA" + suffix(logical_id, 17)},
            )
        if kind == "AWS::Lambda::Function":
            name = generated_name(stack, logical_id, 64)
            return Physical(name, {"Arn": arn("lambda", f"function:{name}")})
        if kind == "AWS::Logs::LogGroup":
            name = f"/aws/lambda/{generated_name(stack, logical_id, 64)}"
            return Physical(name, {"Arn": arn("logs", f"log-group:{name}:*")})
        if kind == "AWS::Events::EventBus":
            name = str(props.get("Name") or generated_name(stack, logical_id, 256))
            return Physical(name, {"Arn": arn("events", f"event-bus/{name}"), "Name": name})
        if kind == "AWS::Scheduler::ScheduleGroup":
            name = str(props.get("Name") or generated_name(stack, logical_id, 64))
            return Physical(name, {"Arn": arn("scheduler", f"schedule-group/{name}")})
        if kind == "AWS::DynamoDB::Table":
            name = str(props.get("TableName") or generated_name(stack, logical_id, 255))
            table = arn("dynamodb", f"table/{name}")
            return Physical(name, {"Arn": table, "StreamArn": f"{table}/stream/2026-01-01T00:00:00.000"})
        if kind == "AWS::S3::Bucket":
            name = str(props.get("BucketName") or generated_name(stack, logical_id, 63)).lower()
            return Physical(name, {"Arn": f"arn:{PARTITION}:s3:::{name}"})
        if kind == "AWS::SQS::Queue":
            name = str(props.get("QueueName") or generated_name(stack, logical_id, 80))
            url = f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/{name}"
            return Physical(url, {"Arn": arn("sqs", name), "QueueName": name, "QueueUrl": url})
        if kind == "AWS::SNS::Topic":
            name = str(props.get("TopicName") or generated_name(stack, logical_id, 256))
            return Physical(arn("sns", name), {"TopicArn": arn("sns", name), "TopicName": name})
        if kind == "AWS::KMS::Key":
            key = str(uuid.UUID(bytes=hashlib.sha256(logical_id.encode()).digest()[:16], version=4))
            return Physical(key, {"Arn": arn("kms", f"key/{key}"), "KeyId": key})
        if kind == "AWS::SecretsManager::Secret":
            name = str(props.get("Name") or f"{logical_id}-{suffix(logical_id, 12)}")
            secret = arn("secretsmanager", f"secret:{name}-{suffix(name, 6)}")
            return Physical(secret, {"Id": secret})
        if kind == "AWS::SSM::Parameter":
            name = str(props.get("Name") or generated_name(stack, logical_id, 2048))
            return Physical(name, {"Type": str(props.get("Type", "String"))})
        if kind.startswith("AWS::AppConfig::"):  # AppConfig names its resources by 7-character ids
            ident = "1" if kind.endswith("HostedConfigurationVersion") else suffix(logical_id, 7).lower()
            return Physical(ident, {})
        name = generated_name(stack, logical_id, 64)
        service = kind.split("::")[1].lower()
        return Physical(name, {"Arn": arn(service, f"{logical_id.lower()}/{name}")})

    def set_physical(self, logical_id: str, physical: Physical) -> None:
        self.physical[logical_id] = physical

    # ------------------------------------------------------------------ intrinsic functions
    def resolve(self, value: Any) -> Any:
        if isinstance(value, list):
            return [self.resolve(v) for v in value]
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            ((key, arg),) = value.items()
            handler = self._intrinsics().get(key)
            if handler is not None:
                return handler(arg)
        return {k: self.resolve(v) for k, v in value.items()}

    def _intrinsics(self) -> dict[str, Callable[[Any], Any]]:
        return {
            "Ref": self._ref,
            "Fn::GetAtt": self._get_att,
            "Fn::Join": lambda a: str(self.resolve(a[0])).join(
                str(self.resolve(p)) for p in self.resolve(a[1])
            ),
            "Fn::Select": lambda a: self.resolve(a[1])[int(self.resolve(a[0]))],
            "Fn::Split": lambda a: str(self.resolve(a[1])).split(str(self.resolve(a[0]))),
            "Fn::Sub": self._sub,
        }

    def _ref(self, name: str) -> str:
        pseudo = {
            "AWS::Partition": PARTITION,
            "AWS::Region": REGION,
            "AWS::AccountId": ACCOUNT,
            "AWS::StackName": self.stack_name,
            "AWS::URLSuffix": "amazonaws.com",
            "AWS::NoValue": "",
        }
        if name in pseudo:
            return pseudo[name]
        if name in self.body.get("Parameters", {}):
            return str(self.body["Parameters"][name].get("Default", ""))
        return self.physical_of(name).ref

    def _get_att(self, arg: Any) -> str:
        logical_id, attribute = arg if isinstance(arg, list) else str(arg).split(".", 1)
        physical = self.physical_of(str(logical_id))
        if attribute not in physical.attributes:
            raise TemplateError(
                f"Fn::GetAtt {logical_id}.{attribute}: the rehearsal does not know this attribute"
            )
        return physical.attributes[attribute]

    def _sub(self, arg: Any) -> str:
        text, variables = (arg[0], self.resolve(arg[1])) if isinstance(arg, list) else (arg, {})
        out, rest = [], str(text)
        while "${" in rest:
            before, _, after = rest.partition("${")
            name, _, rest = after.partition("}")
            out.append(before)
            if name in variables:
                out.append(str(variables[name]))
            elif "." in name and not name.startswith("AWS::"):
                out.append(self._get_att(name))
            else:
                out.append(self._ref(name))
        out.append(rest)
        return "".join(out)

    # ------------------------------------------------------------------ functions
    def role_statements(self, role_logical_id: str) -> list[dict[str, Any]]:
        """Every statement of a role: its inline policies and each ``AWS::IAM::Policy`` attached."""
        statements: list[dict[str, Any]] = []
        for policy in self.props(role_logical_id).get("Policies") or []:
            statements.extend(self.resolve(policy["PolicyDocument"]).get("Statement", []))
        for logical_id, policy in self.of_type("AWS::IAM::Policy").items():
            roles = policy["Properties"].get("Roles") or []
            if {"Ref": role_logical_id} in roles:
                statements.extend(self.resolve(self.props(logical_id)["PolicyDocument"]).get("Statement", []))
        return statements

    def functions(self) -> dict[str, FunctionDeploy]:
        """Rebound's functions by their ``rebound.resources`` name."""
        known = {r.service_name(spec.logical): spec.logical for spec in r.SPEC.functions}
        out: dict[str, FunctionDeploy] = {}
        for logical_id, resource in self.of_type("AWS::Lambda::Function").items():
            props = resource["Properties"]
            environment = {
                k: str(v)
                for k, v in self.resolve((props.get("Environment") or {}).get("Variables") or {}).items()
            }
            logical = known.get(environment.get("POWERTOOLS_SERVICE_NAME", ""))
            if logical is None:
                continue  # not one of Rebound's functions (a custom resource's, say)
            role = props["Role"]
            role_id = role["Fn::GetAtt"][0] if isinstance(role, dict) and "Fn::GetAtt" in role else None
            asset = (resource.get("Metadata") or {}).get("aws:asset:path") or self._staged_asset(
                props.get("Code") or {}
            )
            physical = self.physical_of(logical_id)
            out[logical] = FunctionDeploy(
                logical_id=logical_id,
                logical=logical,
                name=physical.ref,
                arn=physical.attributes["Arn"],
                handler=str(props["Handler"]),
                runtime=str(props.get("Runtime", "")),
                timeout_s=int(props.get("Timeout", 3)),
                memory_mb=int(props.get("MemorySize", 128)),
                environment=environment,
                role_arn=str(self.resolve(role)),
                statements=tuple(self.role_statements(role_id) if role_id else []),
                code_path=(self.asset_dir / asset) if asset and self.asset_dir else None,
            )
        return out

    def _staged_asset(self, code: dict[str, Any]) -> str | None:
        """``asset.<hash>`` beside the template: where the CDK stages the asset its S3 key names."""
        key = code.get("S3Key")
        if not isinstance(key, str) or not key.endswith(".zip"):
            return None
        return f"asset.{key.removesuffix('.zip')}"

    def resources_document(self, environment: str) -> dict[str, Any]:
        """The environment's resources document (the SSM parameter the CLI reads), resolved."""
        name = r.resources_parameter(environment)
        for logical_id in self.of_type("AWS::SSM::Parameter"):
            if self.physical_of(logical_id).ref == name:
                return dict(json.loads(str(self.resolve(self.props(logical_id))["Value"])))
        raise TemplateError(
            f"the template has no {name} parameter: the CLI and the rehearsal cannot find the resources"
        )

    def key_policies(self) -> dict[str, list[dict[str, Any]]]:
        """Each KMS key's ARN -> its key policy's statements."""
        return {
            self.physical_of(k).attributes["Arn"]: self.resolve(v["Properties"].get("KeyPolicy") or {}).get(
                "Statement", []
            )
            for k, v in self.of_type("AWS::KMS::Key").items()
        }


def synthesize(environment: str = "dev", outdir: Path | None = None) -> Path:
    """One environment's template (see ``synthesize_all``)."""
    return synthesize_all((environment,), outdir)[environment]


def synthesize_all(environments: Sequence[str], outdir: Path | None = None) -> dict[str, Path]:
    """Synthesize environments the way ``make synth`` does (in a subprocess: the CDK app runs
    jsii's node process) and return each one's template's path."""
    out = outdir or REPO_ROOT / "build" / "rehearse" / "cdk.out"
    script = (
        "import sys; sys.path[:0] = [sys.argv[1] + '/infra', sys.argv[1] + '/functions']\n"
        "from rebound_infra.app import build_app\n"
        "app, _ = build_app(sys.argv[2].split(','), outdir=sys.argv[3]); app.synth()\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script, str(REPO_ROOT), ",".join(environments), str(out)],
        capture_output=True,
        text=True,
        check=False,
        env={
            **os.environ,
            "JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION": "1",
            "JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION": "1",
        },
    )
    paths = {env: out / f"Rebound-{env}.template.json" for env in environments}
    if result.returncode != 0 or not all(path.is_file() for path in paths.values()):
        raise TemplateError(
            f"synthesizing {', '.join(environments)} failed:\n{result.stderr.strip()[-4000:]}"
        )
    return paths
