"""The operations API: API Gateway REST with IAM authorization on every method, proxying to the
``ops_api`` function. Access logs and execution logs go to CloudWatch; requests are throttled."""

from __future__ import annotations

from aws_cdk import RemovalPolicy
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from rebound_infra.nag import acknowledge


class OpsApi(Construct):
    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        handler: lambda_.IFunction,
        stage_name: str,
        rate_limit: float,
        burst_limit: int,
        cloudwatch_role: bool,
        log_retention: logs.RetentionDays,
        removal_policy: RemovalPolicy,
        log_key: kms.IKey | None = None,
    ) -> None:
        super().__init__(scope, id)
        self.access_logs = logs.LogGroup(
            self, "AccessLogs", retention=log_retention, removal_policy=removal_policy, encryption_key=log_key
        )
        self.api = apigw.RestApi(
            self,
            "Api",
            description="Rebound operations API (IAM authorization)",
            endpoint_types=[apigw.EndpointType.REGIONAL],
            cloud_watch_role=cloudwatch_role,
            cloud_watch_role_removal_policy=RemovalPolicy.RETAIN,
            default_method_options=apigw.MethodOptions(authorization_type=apigw.AuthorizationType.IAM),
            deploy_options=apigw.StageOptions(
                stage_name=stage_name,
                access_log_destination=apigw.LogGroupLogDestination(self.access_logs),
                access_log_format=apigw.AccessLogFormat.json_with_standard_fields(
                    caller=True,
                    http_method=True,
                    ip=True,
                    protocol=True,
                    request_time=True,
                    resource_path=True,
                    response_length=True,
                    status=True,
                    user=True,
                ),
                logging_level=apigw.MethodLoggingLevel.INFO,
                data_trace_enabled=False,
                metrics_enabled=True,
                throttling_rate_limit=rate_limit,
                throttling_burst_limit=burst_limit,
            ),
        )
        self.validator = self.api.add_request_validator(
            "Validator", validate_request_body=True, validate_request_parameters=True
        )
        integration = apigw.LambdaIntegration(handler)
        self.api.root.add_proxy(
            default_integration=integration,
            any_method=True,
            default_method_options=apigw.MethodOptions(
                authorization_type=apigw.AuthorizationType.IAM, request_validator=self.validator
            ),
        )
        if cloudwatch_role:
            acknowledge(
                self.api,
                "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/"
                "AmazonAPIGatewayPushToCloudWatchLogs]",
                "API Gateway's account-level logging role uses the AWS managed policy AWS documents "
                "for it; it is assumable only by API Gateway and grants log writes only.",
            )
        acknowledge(
            self.api,
            "AwsSolutions-COG4",
            "The ops API authorizes callers with IAM (SigV4): operators and services use their IAM "
            "identities, so there is no Cognito user pool.",
        )
        acknowledge(
            self.api,
            "AwsSolutions-APIG3",
            "IAM authorization rejects unsigned requests before they reach the integration, and the "
            "stage is throttled; a WAF web ACL is left to the deploying account's edge policy.",
        )
