"""The ops API: every method behind IAM authorization, logged and throttled; the handler answers
``GET /health`` with its environment."""

from __future__ import annotations

import json
from typing import Any

import pytest
from infra_helpers import Synth

pytestmark = pytest.mark.infra


def test_every_api_method_requires_iam_authorization(synth: Synth, env: str) -> None:
    methods = synth.resources(env, "AWS::ApiGateway::Method").values()
    assert methods
    for method in methods:
        assert method["Properties"]["AuthorizationType"] == "AWS_IAM"


def test_the_stage_writes_access_logs_and_is_throttled(synth: Synth, env: str) -> None:
    (stage,) = synth.resources(env, "AWS::ApiGateway::Stage").values()
    props = stage["Properties"]
    assert props["StageName"] == env
    assert "DestinationArn" in props["AccessLogSetting"]
    (settings,) = props["MethodSettings"]
    assert settings["LoggingLevel"] == "INFO"
    assert settings["DataTraceEnabled"] is False
    assert settings["ThrottlingRateLimit"] == synth.stacks[env].config.api.throttle_rate_limit


class Context:
    function_name = "ops_api"
    memory_limit_in_mb = 256
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:ops_api"
    aws_request_id = "req-1"


def api_event(method: str, path: str) -> dict[str, Any]:
    return {
        "resource": "/{proxy+}",
        "path": path,
        "httpMethod": method,
        "headers": {},
        "multiValueHeaders": {},
        "queryStringParameters": None,
        "multiValueQueryStringParameters": None,
        "pathParameters": {"proxy": path.lstrip("/")},
        "stageVariables": None,
        "requestContext": {"requestId": "r-1", "stage": "dev", "httpMethod": method, "path": path},
        "body": None,
        "isBase64Encoded": False,
    }


def test_health_answers_with_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from rebound.handlers import ops_api

    monkeypatch.setenv("REBOUND_ENV", "staging")
    response = ops_api.lambda_handler(api_event("GET", "/health"), Context())  # type: ignore[arg-type]
    assert response["statusCode"] == 200
    assert json.loads(response["body"]) == {"status": "ok", "environment": "staging"}


def test_an_unknown_route_is_404(monkeypatch: pytest.MonkeyPatch) -> None:
    from rebound.handlers import ops_api

    response = ops_api.lambda_handler(api_event("GET", "/nope"), Context())  # type: ignore[arg-type]
    assert response["statusCode"] == 404
