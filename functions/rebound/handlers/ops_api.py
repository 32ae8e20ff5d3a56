"""Ops API: API Gateway (REST, IAM auth) in; for now only ``GET /health``. The routes of the
operations API (register, pause, resume, retry, work orders) come with the API issue."""

from __future__ import annotations

import os
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayRestResolver
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.utilities.typing import LambdaContext

from rebound import resources as r
from rebound.handlers.observability import logger_for

logger = logger_for("ops_api")
app = APIGatewayRestResolver()


@app.get("/health")
def health() -> dict[str, Any]:
    return {"status": "ok", "environment": os.environ.get(r.ENV_ENVIRONMENT, "unknown")}


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_REST, clear_state=True)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return app.resolve(event, context)
