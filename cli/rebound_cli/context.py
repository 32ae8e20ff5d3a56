"""What every operator command needs: the AWS session, the environment's resources, the operator.

Nothing is built until a command needs it, and then once:

- **Session.** A plain boto3 session, so ``AWS_PROFILE`` and credentials work as everywhere;
  ``AWS_REGION`` is passed as the region (botocore itself reads only ``AWS_DEFAULT_REGION``); no
  client is given an endpoint, so ``AWS_ENDPOINT_URL`` (the local cloud, say) reaches them all.
- **Resources.** Read from the SSM parameter ``/rebound/<env>/resources``, which the CDK stack
  and the local cloud's provisioner both write: no resource flags, the same way everywhere.
- **Operator.** ``sts:GetCallerIdentity``'s ARN: the actor of every audit record the CLI writes.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from rebound import resources as r
from rebound.adapters.errors import error_code, translate
from rebound.domain.errors import NotFound, ValidationFailed
from rebound.engine.ports import Clock, SystemClock

if TYPE_CHECKING:
    from rebound.engine.deps import Deps
    from rebound.engine.health.checks import HealthChecks
    from rebound.ops.access import Guard
    from rebound.ops.approvals import Approvals
    from rebound.ops.audit import AuditOps
    from rebound.ops.authz import Rule
    from rebound.ops.dlq import DlqOps
    from rebound.ops.flags import FlagOps
    from rebound.ops.notifications import NotificationOps
    from rebound.ops.policies import PolicyOps
    from rebound.ops.runs import RunOps
    from rebound.ops.state import StateOps
    from rebound.ops.tasks import TaskOps
    from rebound.ops.workorders import WorkOrderOps
    from rebound.settings import Settings

SQS_WAIT_ENV = "REBOUND_SQS_WAIT_SECONDS"


class DiscardMetrics:
    """Operator commands emit no EMF metrics; the engine's functions do."""

    def count(self, name: str, value: float = 1.0) -> None:
        return None

    def observe(self, name: str, value: float, unit: str = "Milliseconds") -> None:
        return None


CLOCK_KEY = "clock"
"""The resources document's key under which ``rebound local up`` publishes its clock."""


class CloudClock:
    """The local cloud's clock as ``rebound local up`` publishes it: ``origin`` at the wall time
    ``origin_epoch`` (seconds), running ``scale`` times as fast as the wall clock."""

    def __init__(
        self, origin: datetime, origin_epoch: float, scale: float, origin_monotonic: float | None = None
    ) -> None:
        self.origin = origin
        self.origin_epoch = origin_epoch
        self.scale = scale
        self.origin_monotonic = origin_monotonic
        """The cloud's monotonic time at ``origin``, when this process shares its machine's boot:
        then ``now`` reads the clock the cloud itself reads, with no drift between wall and
        monotonic time to scale up."""

    @classmethod
    def from_document(cls, value: Any) -> CloudClock:
        try:
            from rebound_local.clock import boot_id

            same_boot = value.get("boot_id") is not None and value.get("boot_id") == boot_id()
            return cls(
                datetime.fromisoformat(str(value["origin"])).astimezone(UTC),
                float(value["origin_epoch"]),
                float(value["scale"]),
                float(value["origin_monotonic"]) if same_boot else None,
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValidationFailed(
                f"the resources document's clock is not origin, origin_epoch and scale: {value!r}",
                key_path=CLOCK_KEY,
            ) from exc

    def now(self) -> datetime:
        if self.origin_monotonic is not None:
            return self.origin + timedelta(seconds=(time.monotonic() - self.origin_monotonic) * self.scale)
        return self.origin + timedelta(seconds=(time.time() - self.origin_epoch) * self.scale)

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds / self.scale)


@dataclass
class Overrides:
    """What tests (and programs embedding the CLI) may supply instead of the defaults.

    Pass one as ``obj`` to ``CliRunner.invoke``: ``clock`` is the domain clock (the local cloud's
    virtual clock), ``on_session`` sees the boto3 session before any client exists (to register
    botocore event hooks), ``sleep`` replaces ``time.sleep`` for rate limits and backoff, and
    ``sqs_wait_s`` the long poll.
    """

    clock: Clock | None = None
    on_session: Callable[[boto3.session.Session], None] | None = None
    sleep: Callable[[float], None] | None = None
    sqs_wait_s: int | None = None
    terminal: bool | None = None
    """Whether a person answers prompts on stdin (None: whether stdin is a terminal)."""


class App:
    def __init__(self, env: str, output: str | None, debug: bool, overrides: Overrides | None = None) -> None:
        self.env = env
        self.output = output
        self.debug = debug
        self.overrides = overrides or Overrides()
        self.profile: str | None = None
        self.region: str | None = None
        """``--profile`` and ``--region``: over ``AWS_PROFILE`` and ``AWS_REGION``."""
        self.query: str | None = None
        """``--query``: a JMESPath expression over the JSON output (``output.emit``)."""
        self.decided_tenant: str | None = None
        """The tenant the command's rule decided on (``decide``)."""
        self._cloud_clock: Any = None

    @property
    def json(self) -> bool:
        """One document on stdout (``--output json`` or ``yaml``) rather than lines for people."""
        return self.output in ("json", "yaml")

    # --------------------------------------------------------------------------- AWS
    @cached_property
    def session(self) -> boto3.session.Session:
        try:
            session = boto3.session.Session(
                profile_name=self.profile, region_name=self.region or os.environ.get("AWS_REGION") or None
            )
        except BotoCoreError as exc:  # an unknown AWS_PROFILE, for one
            raise ValidationFailed(f"AWS configuration: {exc}", key_path="AWS_PROFILE") from exc
        if self.overrides.on_session is not None:
            self.overrides.on_session(session)
        return session

    def client(self, service: str) -> Any:
        from rebound.wiring import AWS_CONFIG

        return self.session.client(service, config=AWS_CONFIG)  # type: ignore[call-overload]

    @cached_property
    def settings(self) -> Settings:
        from rebound.settings import settings_from_document

        name = r.resources_parameter(self.env)
        region = self.session.region_name or "(no region)"
        try:
            value = self.client("ssm").get_parameter(Name=name)["Parameter"]["Value"]
        except ClientError as exc:
            if error_code(exc) == "ParameterNotFound":
                raise NotFound(
                    f"no Rebound environment {self.env!r} in {region}: SSM parameter {name} does not exist "
                    "(deploy the stack, start `rebound local up`, or pick another --env)",
                    env=self.env,
                ) from exc
            raise translate(exc, f"read {name}") from exc
        except BotoCoreError as exc:
            raise translate(exc, f"read {name}") from exc
        try:
            document = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ValidationFailed(f"{name} does not hold JSON", key_path=name) from exc
        config_dir = os.environ.get(r.ENV_CONFIG_DIR)
        self._cloud_clock = document.get(CLOCK_KEY)
        return settings_from_document(document, Path(config_dir) if config_dir else None)

    @cached_property
    def clock(self) -> Clock:
        """The domain clock: the override, else the clock the environment's resources document
        publishes (``rebound local up``'s scaled clock), else the system's (AWS)."""
        if self.overrides.clock is not None:
            return self.overrides.clock
        self.settings  # noqa: B018 (reading the resources document finds the published clock)
        published = self._cloud_clock
        return CloudClock.from_document(published) if published is not None else SystemClock()

    @cached_property
    def deps(self) -> Deps:
        from rebound.wiring import build_deps

        return build_deps(
            self.settings,
            session=self.session,
            clock=self.clock,
            metrics=DiscardMetrics(),
        )

    @cached_property
    def actor(self) -> str:
        """The operator, as AWS knows them: the ARN every audit record the CLI writes carries."""
        try:
            return str(self.client("sts").get_caller_identity()["Arn"])
        except (ClientError, BotoCoreError) as exc:
            raise translate(exc, "find who you are (sts:GetCallerIdentity)") from exc

    @cached_property
    def guard(self) -> Guard:
        """``authorize`` for the operator (``sts:GetCallerIdentity``, asked once), refusals audited;
        where every caller is an administrator (the local cloud) nobody is asked."""
        from rebound.api.auth import Caller, Gate
        from rebound.ops.access import UNGUARDED, TenantAccess

        access = TenantAccess(self.deps)
        if access.everyone_admin:
            return UNGUARDED
        return Gate(Caller(self.actor, access.tenants_of(self.actor)), access)

    def decide(self, rule: Rule, args: Mapping[str, Any]) -> str | None:
        """Apply a command's declared rule (``rebound_cli.authz``) to its arguments, before the
        command reads anything; the tenant decided on is ``decided_tenant``."""
        if rule.public:
            return None
        self.decided_tenant = rule.decide(self.guard, self.deps, args)
        return self.decided_tenant

    def sees(self, tenant: str | None) -> bool:
        """Whether a list shows the operator a thing of ``tenant`` (one of no tenant: always)."""
        return tenant is None or self.guard.sees(tenant)

    def task_key(self, task_id: str | None) -> str | None:
        """The key of the task ``--task`` names: a short id (``nightly``) that exactly one task the
        operator may see has becomes its ``<tenant>.<id>``; one several tenants share is refused
        with their keys (exit 2)."""
        if not task_id:
            return task_id
        from rebound.ops.access import task_key

        return task_key(self.deps.store, task_id, self.guard, field="--task")

    @property
    def sleep(self) -> Callable[[float], None]:
        import time

        return self.overrides.sleep or time.sleep

    @property
    def sqs_wait_s(self) -> int:
        if self.overrides.sqs_wait_s is not None:
            return self.overrides.sqs_wait_s
        from rebound.ops.dlq import DEFAULT_WAIT_S

        return int(os.environ.get(SQS_WAIT_ENV) or DEFAULT_WAIT_S)

    # --------------------------------------------------------------------------- operations
    # Reading commands never ask STS who you are; commands that write do.
    def tasks(self, *, writer: bool = False, rate: float | None = None) -> TaskOps:
        from rebound.ops.tasks import TaskOps
        from rebound.ops.throttle import Backoff, RateLimiter

        limiter = RateLimiter(rate, sleep=self.sleep) if rate else None
        return TaskOps(
            self.deps,
            self.actor if writer else "reader",
            limiter=limiter,
            backoff=Backoff(sleep=self.sleep),
            guard=self.guard,
        )

    def dlq(self, *, writer: bool = False) -> DlqOps:
        from rebound.ops.dlq import DlqOps

        return DlqOps(self.deps, self.actor if writer else "reader", wait_s=self.sqs_wait_s, sleep=self.sleep)

    def runs(self, *, writer: bool = False) -> RunOps:
        from rebound.ops.runs import RunOps

        return RunOps(self.deps, self.actor if writer else "reader", dlq=self.dlq(writer=writer))

    def workorders(self, *, writer: bool = False) -> WorkOrderOps:
        from rebound.ops.workorders import WorkOrderOps

        return WorkOrderOps(self.deps, self.actor if writer else "reader")

    def policies(self, *, writer: bool = False) -> PolicyOps:
        from rebound.ops.policies import PolicyOps

        return PolicyOps(self.deps, self.actor if writer else "reader")

    def approvals(self, *, writer: bool = False) -> Approvals:
        from rebound.ops.approvals import Approvals

        return Approvals(self.deps, self.actor if writer else "reader")

    def flags(self, *, writer: bool = False) -> FlagOps:
        from rebound.ops.flags import FlagOps

        return FlagOps(self.deps, self.actor if writer else "reader")

    def notifications(self, *, writer: bool = False) -> NotificationOps:
        from rebound.ops.notifications import NotificationOps

        return NotificationOps(self.deps, self.actor if writer else "reader")

    def health(self) -> HealthChecks:
        from rebound.engine.health.checks import HealthChecks

        return HealthChecks(self.deps, oldest_age=self._oldest_age)

    def audit(self, day_keys: Path | None = None) -> AuditOps:
        """The audit checks; with ``day_keys`` (a file a writer exported with ``rebound audit
        day-keys``), as an auditor: MACs checked with those keys, each confirmed by KMS
        ``VerifyMac``, never ``GenerateMac``."""
        from rebound.ops.audit import AuditOps

        if day_keys is None:
            return AuditOps(self.deps)
        from rebound.adapters.audit_keys import VerifyingAuditKeys, read_day_keys

        try:
            document = json.loads(day_keys.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValidationFailed(
                f"{day_keys}: cannot read a day-keys document ({exc})", key_path="--day-keys"
            ) from exc
        supplied = read_day_keys(document, str(day_keys))
        key_id = self.settings.audit_key_id or ""
        keys = VerifyingAuditKeys(self.client("kms"), key_id, supplied, source=str(day_keys))
        return AuditOps(self.deps, keys)

    def state(self, *, writer: bool = False) -> StateOps:
        from rebound.ops.state import StateOps

        return StateOps(self.deps, self.actor if writer else "reader")

    def _oldest_age(self, queue_name: str) -> float | None:
        """``ApproximateAgeOfOldestMessage`` of a queue over the last 15 minutes, if CloudWatch has it."""
        from datetime import timedelta

        end = self.deps.clock.now()
        try:
            points = self.client("cloudwatch").get_metric_statistics(
                Namespace="AWS/SQS",
                MetricName="ApproximateAgeOfOldestMessage",
                Dimensions=[{"Name": "QueueName", "Value": queue_name}],
                StartTime=end - timedelta(minutes=15),
                EndTime=end,
                Period=300,
                Statistics=["Maximum"],
            )["Datapoints"]
        except (ClientError, BotoCoreError):
            return None  # no metrics permission or no CloudWatch here: the health check samples instead
        if not points:
            return None
        return float(max(p["Maximum"] for p in points))
