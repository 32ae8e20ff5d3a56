"""Ops API: API Gateway (REST, IAM auth) in, the operations API's route table (``rebound.api``) out."""

from __future__ import annotations

import os
from functools import cache
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.logging import correlation_paths

from rebound import resources as r
from rebound import wiring
from rebound.handlers.observability import invocation_keys, logger_for

if TYPE_CHECKING:
    from aws_lambda_powertools.event_handler import APIGatewayRestResolver
    from aws_lambda_powertools.utilities.typing import LambdaContext

logger = logger_for("ops_api")


def environment() -> str:
    """The function's own environment variable (set on every deployed function): ``GET /health``
    answers from it without building the dependencies."""
    return os.environ.get(r.ENV_ENVIRONMENT) or wiring.deps().settings.environment


def continuation(job_id: str) -> None:
    """A redrive job's next chunk runs in a fresh invocation of this function (asynchronous, so
    each chunk has the function's whole timeout); outside Lambda, in a background thread."""
    from rebound.ops.dlq.jobs import LambdaContinuation, ThreadContinuation

    name = os.environ.get("AWS_LAMBDA_FUNCTION_NAME")
    if name:
        LambdaContinuation(name, _lambda_client())(job_id)
    else:
        ThreadContinuation(wiring.deps)(job_id)


@cache
def _lambda_client() -> Any:
    import boto3

    return boto3.client("lambda")


@cache
def app() -> APIGatewayRestResolver:
    """The route table, built by the first request (its modules are most of this function's
    imports: docs/performance.md, "Cold import"), then kept for the container's life."""
    from rebound.api import build_app

    return build_app(wiring.deps, environment=environment, continuation=continuation)


@invocation_keys(logger, correlation_paths.API_GATEWAY_REST)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    from rebound.ops.dlq.jobs import CONTINUE, continue_job

    if CONTINUE in event:  # a redrive job's next chunk (this function invoked itself)
        return continue_job(wiring.deps(), str(event[CONTINUE]), continuation).as_dict()
    return app().resolve(event, context)
