"""The environment's feature flags in AWS AppConfig (``rebound.domain.flags``): an application, an
environment, a freeform JSON profile in Powertools' feature-flags form holding every flag at its
default, a deployment strategy that deploys at once, and the first deployment.

The handlers read the profile through AppConfigData (Powertools' ``AppConfigStore``, cached 30 s);
``rebound flags set`` writes a new hosted version and deploys it with the same strategy. A stack
update that leaves the flags' list alone changes none of this, so the values operators set stay.
"""

from __future__ import annotations

import json

from aws_cdk import Stack
from aws_cdk import aws_appconfig as appconfig
from constructs import Construct

from rebound.domain.flags import DEFAULTS, flags_document


class FeatureFlags(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, prefix: str, environment: str) -> None:
        super().__init__(scope, construct_id)
        self.application = appconfig.CfnApplication(self, "Application", name=f"{prefix}-flags")
        self.environment = appconfig.CfnEnvironment(
            self, "Environment", application_id=self.application.ref, name=environment
        )
        self.profile = appconfig.CfnConfigurationProfile(
            self,
            "Profile",
            application_id=self.application.ref,
            name="flags",
            location_uri="hosted",
            type="AWS.Freeform",
        )
        self.version = appconfig.CfnHostedConfigurationVersion(
            self,
            "Defaults",
            application_id=self.application.ref,
            configuration_profile_id=self.profile.ref,
            content=json.dumps(flags_document(DEFAULTS), sort_keys=True),
            content_type="application/json",
        )
        self.strategy = appconfig.CfnDeploymentStrategy(
            self,
            "AtOnce",
            name=f"{prefix}-flags-at-once",
            deployment_duration_in_minutes=0,
            growth_factor=100,
            final_bake_time_in_minutes=0,
            replicate_to="NONE",
        )
        appconfig.CfnDeployment(
            self,
            "FirstDeployment",
            application_id=self.application.ref,
            environment_id=self.environment.ref,
            configuration_profile_id=self.profile.ref,
            configuration_version=self.version.ref,
            deployment_strategy_id=self.strategy.ref,
        )

    @property
    def location(self) -> str:
        """``Settings.flags`` for the handlers (CloudFormation tokens)."""
        return ":".join(
            ("appconfig", self.application.ref, self.environment.ref, self.profile.ref, self.strategy.ref)
        )

    def read_arn(self) -> str:
        """What AppConfigData's session and reads are granted on."""
        return Stack.of(self).format_arn(
            service="appconfig",
            resource="application",
            resource_name=f"{self.application.ref}/environment/{self.environment.ref}/configuration/{self.profile.ref}",
        )

    def profile_arn(self) -> str:
        """Where ``rebound flags set`` writes a new version of the flags."""
        return Stack.of(self).format_arn(
            service="appconfig",
            resource="application",
            resource_name=f"{self.application.ref}/configurationprofile/{self.profile.ref}",
        )

    def deploy_arns(self) -> list[str]:
        """What deploying that version names: the environment, the profile, the strategy."""
        stack = Stack.of(self)
        return [
            stack.format_arn(
                service="appconfig",
                resource="application",
                resource_name=f"{self.application.ref}/environment/{self.environment.ref}",
            ),
            self.profile_arn(),
            stack.format_arn(
                service="appconfig", resource="deploymentstrategy", resource_name=self.strategy.ref
            ),
        ]
