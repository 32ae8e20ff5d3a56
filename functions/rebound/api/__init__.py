"""The operations API: one route table over ``rebound.ops``, the layer the CLI uses, so the CLI,
the API and the console can never disagree.

``build_app(deps)`` returns a Powertools ``APIGatewayRestResolver`` (request validation on, the
OpenAPI document generated from the routes). The ``ops_api`` Lambda serves it behind API Gateway
with IAM authorization; the console serves the same app in-process.
"""

from __future__ import annotations

from rebound.api.app import build_app, openapi_document

__all__ = ["build_app", "openapi_document"]
