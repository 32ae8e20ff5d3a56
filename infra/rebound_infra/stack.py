"""One Rebound environment as one stack, composed of the constructs in ``rebound_infra.constructs``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aws_cdk import AssetHashType, CfnOutput, Environment, RemovalPolicy, Stack, Tags
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from rebound import resources as r
from rebound.config.loader import load_policy_book
from rebound.domain.target_specs import TargetRules
from rebound.settings import QueueRef, Settings, resources_document, settings_to_env
from rebound_infra.bundling import LambdaAssets
from rebound_infra.config import EnvironmentConfig
from rebound_infra.constructs.archive import AuditArchive
from rebound_infra.constructs.audit import Auditor, seal_audit_table
from rebound_infra.constructs.events import Events
from rebound_infra.constructs.flags import FeatureFlags
from rebound_infra.constructs.functions import (
    ARCHITECTURE,
    RUNTIME,
    FunctionInputs,
    Functions,
    Triggers,
    VpcPlacement,
)
from rebound_infra.constructs.keys import AuditKey, DataKey
from rebound_infra.constructs.messaging import Messaging
from rebound_infra.constructs.observability import Observability
from rebound_infra.constructs.ops_api import OpsApi
from rebound_infra.constructs.scheduling import Scheduling
from rebound_infra.constructs.schema_registry import SchemaRegistry
from rebound_infra.constructs.state import State
from rebound_infra.constructs.tenant_secrets import TenantSecretsRole
from rebound_infra.nag import acknowledge
from rebound_infra.permissions import (
    Grantables,
    deny_audit_rewrites,
    grant,
    needs_data_key,
    writes_audit,
)

# Inside the bundle the task configuration is found next to the package (``rebound/_config``).
BUNDLED_CONFIG_DIR = Path("/var/task/rebound/_config")
_RETENTION = {
    1: logs.RetentionDays.ONE_DAY,
    3: logs.RetentionDays.THREE_DAYS,
    5: logs.RetentionDays.FIVE_DAYS,
    7: logs.RetentionDays.ONE_WEEK,
    14: logs.RetentionDays.TWO_WEEKS,
    30: logs.RetentionDays.ONE_MONTH,
    60: logs.RetentionDays.TWO_MONTHS,
    90: logs.RetentionDays.THREE_MONTHS,
    120: logs.RetentionDays.FOUR_MONTHS,
    150: logs.RetentionDays.FIVE_MONTHS,
    180: logs.RetentionDays.SIX_MONTHS,
    365: logs.RetentionDays.ONE_YEAR,
    400: logs.RetentionDays.THIRTEEN_MONTHS,
    545: logs.RetentionDays.EIGHTEEN_MONTHS,
    731: logs.RetentionDays.TWO_YEARS,
    1096: logs.RetentionDays.THREE_YEARS,
    1827: logs.RetentionDays.FIVE_YEARS,
    2192: logs.RetentionDays.SIX_YEARS,
    2557: logs.RetentionDays.SEVEN_YEARS,
    2922: logs.RetentionDays.EIGHT_YEARS,
    3288: logs.RetentionDays.NINE_YEARS,
    3653: logs.RetentionDays.TEN_YEARS,
}
DEAD_LETTER_QUEUES = (r.EXECUTION_DLQ.logical, r.CONTROL_DLQ.logical, r.SCHEDULER_DLQ.logical)


class ReboundStack(Stack):
    def __init__(
        self, scope: Construct, config: EnvironmentConfig, assets: LambdaAssets, **kwargs: Any
    ) -> None:
        pinned = config.account or config.region
        env = Environment(account=config.account, region=config.region) if pinned else None
        super().__init__(
            scope,
            config.stack_name,
            description=f"Rebound ({config.name}): scheduled and event-triggered tasks that are never lost",
            termination_protection=config.termination_protection,
            env=env,
            **kwargs,
        )
        self.config = config
        retain = config.retain_data
        removal = RemovalPolicy.RETAIN if retain else RemovalPolicy.DESTROY
        Tags.of(self).add("rebound:environment", config.name)
        for tag, value in config.tags.items():
            Tags.of(self).add(tag, value)

        # encryption: cmk — one customer-managed key for the tables, queues, log groups and topic
        self.data_key = DataKey(self, "DataKey", retain=retain) if config.encryption == "cmk" else None
        key = self.data_key.key if self.data_key is not None else None
        self.audit_key = AuditKey(self, "AuditKey", retain=retain)
        self.messaging = Messaging(self, "Messaging", retain=retain, key=key)
        queues = self.messaging.queues
        self.state = State(
            self,
            "State",
            retain=retain,
            deletion_protection=config.deletion_protection,
            key=key,
            capacity=config.capacity,
            keep_indexes=config.upgrade.keep_indexes,
        )
        seal_audit_table(self.state.tables[r.AUDIT.logical], retain=retain)
        self.archive = AuditArchive(
            self, "AuditArchive", key=key, object_lock_days=config.retention.object_lock_days
        )
        self.scheduling = Scheduling(
            self,
            "Scheduling",
            execution_queue=queues[r.EXECUTION.logical],
            escalation_queue=queues[r.ESCALATION.logical],
            dead_letter_queue=queues[r.SCHEDULER_DLQ.logical],
            retain=retain,
        )
        self.events = Events(
            self,
            "Events",
            queues=dict(queues),
            dead_letter_queue=queues[r.CONTROL_DLQ.logical],
            archive_retention_days=config.bus_archive_retention_days,
            retain=retain,
            source=config.outbox.source,
        )
        self.schema_registry = SchemaRegistry(
            self, "EventSchemas", environment=config.name, source=config.outbox.source
        )
        self.observability = Observability(
            self,
            "Observability",
            environment=config.name,
            thresholds=config.alarms,
            alarm_emails=config.alarm_emails,
            retain=retain,
            runbook_base_url=config.runbook_base_url,
            key=key,
        )
        # The key that signs asynchronous attempts' completion tokens (rebound.domain.completion):
        # generated by Secrets Manager, read by the functions that issue and check tokens.
        self.completion_key = secretsmanager.Secret(
            self,
            "CompletionKey",
            description=f"Rebound ({config.name}): signs the completion tokens of asynchronous attempts",
            generate_secret_string=secretsmanager.SecretStringGenerator(
                exclude_punctuation=True, password_length=64
            ),
            removal_policy=removal,
        )
        acknowledge(
            self.completion_key,
            "AwsSolutions-SMG4",
            "The completion key signs tokens held by asynchronous work for up to a day; rotating it "
            "would refuse every token in flight. Rotate by hand between runs (docs/architecture.md).",
        )
        self.flags = FeatureFlags(
            self, "FeatureFlags", prefix=f"rebound-{config.name}", environment=config.name
        )
        # The named policies the functions' bundle carries (its rebound/_config), for the CLI.
        self.deployed_policies = tuple(load_policy_book(assets.code.path / "rebound" / "_config").names())
        self.settings = self._settings()

        code, deps = assets.code, assets.dependencies
        self.layer = lambda_.LayerVersion(
            self,
            "Dependencies",
            description="Rebound's runtime dependencies (Powertools, pydantic, croniter, ...)",
            code=lambda_.Code.from_asset(
                str(deps.path), asset_hash=deps.hash, asset_hash_type=AssetHashType.CUSTOM
            ),
            compatible_runtimes=[RUNTIME],
            compatible_architectures=[ARCHITECTURE],
            removal_policy=RemovalPolicy.DESTROY,
        )
        environment = settings_to_env(self.settings)
        environment.pop(r.ENV_CONFIG_DIR, None)  # the bundle's own rebound/_config
        environment["POWERTOOLS_LOG_LEVEL"] = config.log_level
        self.functions = Functions(
            self,
            "Functions",
            inputs=FunctionInputs(
                code=lambda_.Code.from_asset(
                    str(code.path), asset_hash=code.hash, asset_hash_type=AssetHashType.CUSTOM
                ),
                layer=self.layer,
                environment=environment,
                log_retention=_RETENTION[config.log_retention_days],
                removal_policy=removal,
                log_key=key,
                vpc=self._vpc(),
                tracing=config.tracing,
            ),
            triggers=Triggers(
                queues=dict(queues),
                tables=dict(self.state.tables),
                stream_failures=queues[r.CONTROL_DLQ.logical],
                scheduler_dlq=queues[r.SCHEDULER_DLQ.logical],
                outbox_retry_attempts=config.outbox.retry_attempts,
                outbox_max_record_age_s=config.outbox.max_record_age_s,
            ),
        )
        grantables = Grantables(
            tables=dict(self.state.tables),
            queues=dict(queues),
            bus=self.events.bus,
            scheduling=self.scheduling,
            topic=self.observability.topic,
            target_function_arns=config.grants.target_function_arns,
            secret_path=config.secret_path,
            secrets_manager_arns=config.grants.secrets_manager_arns,
            completion_key=self.completion_key,
            flags=self.flags,
            keep_indexes=config.upgrade.keep_indexes,
            archive=self.archive,
            notification_secrets=tuple(
                s
                for s in (
                    config.notifications.pagerduty_secret,
                    config.notifications.slack_secret,
                    config.notifications.sla_webhook_secret,
                )
                if s
            ),
        )
        for logical, built in self.functions.functions.items():
            grant(built, logical, built.role, grantables, built.function)
        roles = {logical: built.role for logical, built in self.functions.functions.items()}
        self.audit_key.allow_writers(
            [roles[name] for name in roles if writes_audit(name)]
            + [iam.ArnPrincipal(arn) for arn in config.audit.writer_roles]
        )
        if self.data_key is not None:
            users = [roles[name] for name in roles if needs_data_key(name)] + [self.scheduling.role]
            self.data_key.allow_roles(users)
            for role in users:
                for action in ("kms:GenerateDataKey*", "kms:ReEncrypt*"):
                    acknowledge(
                        role,
                        f"AwsSolutions-IAM5[Action::{action}]",
                        "CDK's grant on a table or queue encrypted with the environment's one "
                        "customer-managed key: data-key actions on that key only (encryption: cmk).",
                    )

        self.api = OpsApi(
            self,
            "OpsApi",
            handler=self.functions[r.OPS_API_FUNCTION].function,
            stage_name=config.name,
            rate_limit=config.api.throttle_rate_limit,
            burst_limit=config.api.throttle_burst_limit,
            cloudwatch_role=config.api.cloudwatch_role,
            log_retention=_RETENTION[config.log_retention_days],
            removal_policy=removal,
            log_key=key,
        )
        dead_letter_queues = {name: queues[name] for name in DEAD_LETTER_QUEUES}
        self.observability.add_alarms(
            execution_queue=queues[r.EXECUTION.logical],
            dead_letter_queues=dead_letter_queues,
            functions={k: v.function for k, v in self.functions.functions.items()},
            outbox_relay=self.functions["outbox_relay"].function,
            archiver=self.functions["archiver"].function,
        )
        self.observability.add_dashboard(
            execution_queue=queues[r.EXECUTION.logical],
            dead_letter_queues=dead_letter_queues,
            executor=self.functions["executor"].function,
        )
        if config.capacity.mode == "provisioned":
            self.observability.add_capacity_alarms(self.state.tables, config.upgrade.keep_indexes)

        self.resources_parameter = ssm.StringParameter(
            self,
            "Resources",
            parameter_name=r.resources_parameter(config.name),
            description="Every Rebound resource name of this environment, for the CLI",
            string_value=self.to_json_string(resources_document(self.settings)),
        )
        # The executor reads a task's secrets only as that task's tenant (rebound.adapters.secrets).
        executor = self.functions.functions["executor"]
        self.tenant_secrets = TenantSecretsRole(
            self, "TenantSecrets", environment=config.name, reader=executor.role
        )
        executor.function.add_environment(r.ENV_TENANT_SECRETS_ROLE, self.tenant_secrets.role.role_arn)
        self.auditor = self._auditor()
        # Every role in the stack is denied rewriting the audit table, whatever else grants it.
        for construct in self.node.find_all():
            if isinstance(construct, iam.Role):
                deny_audit_rewrites(construct, self.state.tables["audit"])
        CfnOutput(self, "ResourcesParameter", value=self.resources_parameter.parameter_name)
        CfnOutput(self, "OpsApiUrl", value=self.api.api.url)
        CfnOutput(self, "AlertsTopicArn", value=self.observability.topic.topic_arn)
        CfnOutput(self, "DashboardName", value=self.observability.dashboard.dashboard_name)

    def _auditor(self) -> Auditor | None:
        """The read-only auditor role, when ``audit.auditor_principals`` names who may assume it."""
        principals = self.config.audit.auditor_principals
        if not principals:
            return None
        auditor = Auditor(
            self,
            "Auditor",
            environment=self.config.name,
            principals=principals,
            tables=self.state.tables,
            resources_parameter=self.resources_parameter,
            archive=self.archive.bucket,
        )
        self.audit_key.allow_verifiers([auditor.role])
        if self.data_key is not None:
            self.data_key.allow_readers([auditor.role])
        return auditor

    def _vpc(self) -> VpcPlacement | None:
        """The environment's optional VPC, from its ids (no lookup: synthesis stays offline)."""
        vpc = self.config.vpc
        if vpc is None:
            return None
        network = ec2.Vpc.from_vpc_attributes(
            self,
            "Vpc",
            vpc_id=vpc.vpc_id,
            availability_zones=list(vpc.availability_zones),
            private_subnet_ids=list(vpc.subnet_ids),
        )
        groups = tuple(
            ec2.SecurityGroup.from_security_group_id(self, f"SecurityGroup{i}", sg, mutable=False)
            for i, sg in enumerate(vpc.security_group_ids)
        )
        subnets = ec2.SubnetSelection(
            subnets=[ec2.Subnet.from_subnet_id(self, f"Subnet{i}", s) for i, s in enumerate(vpc.subnet_ids)]
        )
        return VpcPlacement(network, subnets, groups)

    def _settings(self) -> Settings:
        """The functions' settings, as CloudFormation tokens; ``settings_to_env`` names them."""
        notifications: dict[str, str] = {}
        if self.config.notifications.pagerduty_secret:
            notifications["pagerduty_secret"] = self.config.notifications.pagerduty_secret
        if self.config.notifications.slack_secret:
            notifications["slack_secret"] = self.config.notifications.slack_secret
        if self.config.notifications.sla_webhook_url:
            notifications["sla_webhook_url"] = self.config.notifications.sla_webhook_url
        if self.config.notifications.sla_webhook_secret:
            notifications["sla_webhook_secret"] = self.config.notifications.sla_webhook_secret
        return Settings(
            environment=self.config.name,
            tables={name: table.table_name for name, table in self.state.tables.items()},
            queues={
                name: QueueRef(url=q.queue_url, arn=q.queue_arn, name=q.queue_name)
                for name, q in self.messaging.queues.items()
            },
            bus_name=self.events.bus.event_bus_name,
            schedule_group=self.scheduling.group.schedule_group_name,
            scheduler_role_arn=self.scheduling.role.role_arn,
            topic_arn=self.observability.topic.topic_arn,
            event_source=self.config.outbox.source,
            tracing=self.config.tracing,
            audit_key_id=self.audit_key.key.key_arn,
            runbook_base_url=self.config.runbook_base_url,
            health_expected_interval_minutes=self.config.health.expected_interval_minutes,
            health_stale_metadata_minutes=self.config.health.stale_metadata_minutes,
            config_dir=BUNDLED_CONFIG_DIR,
            deployed_policies=self.deployed_policies,
            completion_key=self.completion_key.secret_arn,
            flags=self.flags.location,
            targets=self.config.targets or TargetRules.defaults_for(self.config.name),
            approvals=self.config.approvals,
            runs_by_task=(
                r.RUNS_BY_TASK_WHOLE
                if f"runs.{r.RUNS_BY_TASK_WHOLE}" in self.config.upgrade.keep_indexes
                else r.RUNS_BY_TASK
            ),
            identities={k: list(v) for k, v in self.config.identities.items()},
            publish_events=self.config.outbox.publish,
            retention=self.config.retention.retention(),
            archive_bucket=self.archive.bucket.bucket_name,
            **notifications,
        )
