"""Ops API: API Gateway (REST, IAM auth) in, the operations API's route table (``rebound.api``) out."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.utilities.typing import LambdaContext

from rebound import wiring
from rebound.api import build_app
from rebound.handlers.observability import logger_for

logger = logger_for("ops_api")
app = build_app(wiring.deps)


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_REST, clear_state=True)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return app.resolve(event, context)
