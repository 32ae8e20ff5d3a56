"""Powertools objects shared by the handlers, and how engine log lines get their JSON format."""

from __future__ import annotations

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers

NAMESPACE = "Rebound"


def logger_for(service: str) -> Logger:
    logger = Logger(service=f"rebound-{service}")
    # Engine and adapter modules log through the standard library; give them the same JSON format.
    copy_config_to_registered_loggers(source_logger=logger, include={"rebound"})
    return logger


def metrics_for(service: str) -> Metrics:
    return Metrics(namespace=NAMESPACE, service=service)
