"""Ops API: API Gateway (REST, IAM auth) in, the operations API's route table (``rebound.api``) out."""

from __future__ import annotations

import os
from typing import Any

from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.utilities.typing import LambdaContext

from rebound import resources as r
from rebound import wiring
from rebound.api import build_app
from rebound.handlers.observability import logger_for

logger = logger_for("ops_api")


def environment() -> str:
    """The function's own environment variable (set on every deployed function): ``GET /health``
    answers from it without building the dependencies."""
    return os.environ.get(r.ENV_ENVIRONMENT) or wiring.deps().settings.environment


app = build_app(wiring.deps, environment=environment)


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_REST, clear_state=True)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return app.resolve(event, context)
