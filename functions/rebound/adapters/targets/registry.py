"""The invokers available to the executor, built once per container (never at import)."""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import boto3
from botocore.config import Config

from rebound.adapters.secrets import SecretResolver, TenantSecrets
from rebound.adapters.targets.aws_lambda import LambdaClientFactory, LambdaInvoker
from rebound.adapters.targets.dispatch import TargetDispatcher
from rebound.adapters.targets.http import HttpInvoker
from rebound.adapters.targets.sim import SimInvoker
from rebound.domain.target_safety import TARGET_REFUSED
from rebound.domain.target_specs import TargetRules
from rebound.engine.ports import Clock
from rebound.engine.ports.targets import Invocation, Outcome, TargetInvoker

if TYPE_CHECKING:
    from mypy_boto3_lambda import LambdaClient

MAX_CONNECT_TIMEOUT_S = 5
MAX_LAMBDA_CLIENTS = 16


def default_targets(
    session: boto3.session.Session,
    clock: Clock,
    client_kwargs: dict[str, Any],
    rules: TargetRules | None = None,
    environment: str | None = None,
    tenant_secrets_role: str | None = None,
) -> TargetDispatcher:
    """Every target type; under ``rules`` (default: the strictest), ``sim`` only where enabled; with
    ``environment``, an http target may use only its tenant's secrets."""
    rules = rules or TargetRules()
    secrets = SecretResolver(
        lambda: session.client("ssm", **client_kwargs),
        lambda: session.client("secretsmanager", **client_kwargs),
    )
    per_tenant = None
    if tenant_secrets_role:

        def resolver(credentials: Mapping[str, str]) -> SecretResolver:
            kwargs: dict[str, Any] = {**client_kwargs, **credentials}
            return SecretResolver(
                lambda: session.client("ssm", **kwargs),
                lambda: session.client("secretsmanager", **kwargs),
            )

        sts = session.client("sts", **client_kwargs)
        per_tenant = TenantSecrets(sts.assume_role, tenant_secrets_role, resolver)
    invokers: dict[str, TargetInvoker] = {
        "sim": SimInvoker(clock) if rules.sim else RefusedInvoker("the sim target is not enabled here"),
        "lambda": LambdaInvoker(lambda_clients(session, client_kwargs), clock),
        "http": HttpInvoker(secrets, clock, rules=rules, environment=environment, tenant_secrets=per_tenant),
    }
    invokers["plugin"] = invokers["http"]  # a plugin target is an http target with its own route and body
    invokers["capacity"] = invokers["http"]  # so is a capacity reservation (``capacity_reserve``)
    return TargetDispatcher(invokers)


class RefusedInvoker:
    """A target type this environment does not allow: every call is ``TARGET_REFUSED``, terminal."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def invoke(self, target: Any, call: Invocation) -> Outcome:
        return Outcome.failure(TARGET_REFUSED, self.reason, retryable=False)


def lambda_clients(session: boto3.session.Session, client_kwargs: dict[str, Any]) -> LambdaClientFactory:
    """Lambda clients by read timeout, rounded up to whole seconds; the last few built are kept.

    Each has SDK retries off (one attempt: the retry policy decides, and a retried ``Invoke`` after
    a read timeout would run the function twice) and inherits the rest of ``client_kwargs``.
    """
    base: Config | None = client_kwargs.get("config")
    rest = {k: v for k, v in client_kwargs.items() if k != "config"}
    built: dict[int, LambdaClient] = {}
    lock = threading.Lock()

    def client_for(seconds: float) -> LambdaClient:
        whole = max(1, math.ceil(seconds))
        with lock:
            client = built.get(whole)
            if client is None:
                own = Config(
                    read_timeout=whole,
                    connect_timeout=min(whole, MAX_CONNECT_TIMEOUT_S),
                    retries={"mode": "standard", "total_max_attempts": 1},
                )
                client = session.client("lambda", config=base.merge(own) if base else own, **rest)
                if len(built) >= MAX_LAMBDA_CLIENTS:
                    del built[next(iter(built))]
                built[whole] = client
            return client

    return client_for
