"""Powertools objects shared by the handlers, and how engine log lines get their JSON format."""

from __future__ import annotations

import logging

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers

from rebound.resources import service_name

NAMESPACE = "Rebound"


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
