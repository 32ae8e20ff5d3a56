"""One Rebound environment as one stack, composed of the constructs in ``rebound_infra.constructs``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aws_cdk import AssetHashType, CfnOutput, Environment, RemovalPolicy, Stack, Tags
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from rebound import resources as r
from rebound.config.loader import load_policy_book
from rebound.settings import QueueRef, Settings, resources_document, settings_to_env
from rebound_infra.bundling import LambdaAssets
from rebound_infra.config import EnvironmentConfig
from rebound_infra.constructs.events import Events
from rebound_infra.constructs.functions import ARCHITECTURE, RUNTIME, FunctionInputs, Functions, Triggers
from rebound_infra.constructs.messaging import Messaging
from rebound_infra.constructs.observability import Observability
from rebound_infra.constructs.ops_api import OpsApi
from rebound_infra.constructs.scheduling import Scheduling
from rebound_infra.constructs.state import State
from rebound_infra.permissions import Grantables, grant

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
        for key, value in config.tags.items():
            Tags.of(self).add(key, value)

        self.messaging = Messaging(self, "Messaging", retain=retain)
        queues = self.messaging.queues
        self.state = State(self, "State", retain=retain, deletion_protection=config.deletion_protection)
        self.scheduling = Scheduling(
            self,
            "Scheduling",
            execution_queue=queues[r.EXECUTION.logical],
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
        )
        self.observability = Observability(
            self,
            "Observability",
            environment=config.name,
            thresholds=config.alarms,
            alarm_emails=config.alarm_emails,
            retain=retain,
            runbook_base_url=config.runbook_base_url,
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
            notification_secrets=tuple(
                s for s in (config.notifications.pagerduty_secret, config.notifications.slack_secret) if s
            ),
        )
        for logical, built in self.functions.functions.items():
            grant(built, logical, built.role, grantables)

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
        )
        dead_letter_queues = {name: queues[name] for name in DEAD_LETTER_QUEUES}
        self.observability.add_alarms(
            execution_queue=queues[r.EXECUTION.logical],
            dead_letter_queues=dead_letter_queues,
            functions={k: v.function for k, v in self.functions.functions.items()},
            outbox_relay=self.functions["outbox_relay"].function,
        )
        self.observability.add_dashboard(
            execution_queue=queues[r.EXECUTION.logical],
            dead_letter_queues=dead_letter_queues,
            executor=self.functions["executor"].function,
        )

        self.resources_parameter = ssm.StringParameter(
            self,
            "Resources",
            parameter_name=r.resources_parameter(config.name),
            description="Every Rebound resource name of this environment, for the CLI",
            string_value=self.to_json_string(resources_document(self.settings)),
        )
        CfnOutput(self, "ResourcesParameter", value=self.resources_parameter.parameter_name)
        CfnOutput(self, "OpsApiUrl", value=self.api.api.url)
        CfnOutput(self, "AlertsTopicArn", value=self.observability.topic.topic_arn)
        CfnOutput(self, "DashboardName", value=self.observability.dashboard.dashboard_name)

    def _settings(self) -> Settings:
        """The functions' settings, as CloudFormation tokens; ``settings_to_env`` names them."""
        notifications: dict[str, str] = {}
        if self.config.notifications.pagerduty_secret:
            notifications["pagerduty_secret"] = self.config.notifications.pagerduty_secret
        if self.config.notifications.slack_secret:
            notifications["slack_secret"] = self.config.notifications.slack_secret
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
            event_source=r.SPEC.event_source,
            runbook_base_url=self.config.runbook_base_url,
            health_expected_interval_minutes=self.config.health.expected_interval_minutes,
            health_stale_metadata_minutes=self.config.health.stale_metadata_minutes,
            config_dir=BUNDLED_CONFIG_DIR,
            deployed_policies=self.deployed_policies,
            **notifications,
        )
