"""Powertools objects shared by the handlers, and how engine log lines get their JSON format."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers

from rebound.resources import service_name

NAMESPACE = "Rebound"
REDUNDANT_KEYS = ("function_name", "function_arn", "function_memory_size")
"""Keys of the Lambda context every line would repeat and its log group already says: about 140
bytes of a clean run's log lines with CloudFormation's names, $0.07 a million runs (docs/cost.md).
``service`` names the function; ``function_request_id`` and ``cold_start`` stay."""
H = TypeVar("H", bound=Callable[..., Any])


def logger_for(function: str) -> Logger:
    """The logger of the function ``function`` (its ``FunctionSpec.logical``)."""
    logger = Logger(service=service_name(function))
    # Engine and adapter modules log through the standard library; give them the same JSON format.
    # Powertools configures only loggers that exist already, and the engine's are made later (a
    # handler imports the engine at its first invocation): configure their parent, ``rebound``,
    # which each of them reaches by propagation, whenever it is made.
    logging.getLogger("rebound")
    copy_config_to_registered_loggers(source_logger=logger, include={"rebound"})
    return logger


def metrics_for(function: str) -> Metrics:
    """The metrics of the function ``function``: the same service name as its logs."""
    return Metrics(namespace=NAMESPACE, service=service_name(function))


def invocation_keys(logger: Logger, correlation_id_path: str | None = None) -> Callable[[H], H]:
    """Powertools' ``inject_lambda_context`` (state cleared at each invocation), less the keys
    ``REDUNDANT_KEYS``: every line of the invocation carries its request id and whether it was a
    cold start."""

    def decorate(handler: H) -> H:
        @functools.wraps(handler)
        def without_redundant_keys(event: Any, context: Any) -> Any:
            logger.remove_keys(REDUNDANT_KEYS)
            return handler(event, context)

        injected = logger.inject_lambda_context(correlation_id_path=correlation_id_path, clear_state=True)
        return injected(without_redundant_keys)  # type: ignore[return-value]

    return decorate
