"""Each target's configuration as written in a task file (``sim``, ``lambda``, ``http``) and the
environment's rules on targets."""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import ConfigDict, Field, field_validator, model_validator

from rebound.domain.basics import MAX_ASYNC_DURATION_S, ErrorCode, Strict
from rebound.domain.durations import Seconds


class SimAsync(Strict):
    """A simulated asynchronous worker (``behavior: {async: {...}}``), played on the simulated clock:
    it heartbeats every ``heartbeat_every`` until ``stop_heartbeats_after`` (if given), then reports
    completion (or ``fail_with``) once ``duration`` has passed, ``duplicate_completions`` extra times."""

    duration: Annotated[Seconds, Field(gt=0, le=2 * MAX_ASYNC_DURATION_S)]
    heartbeat_every: Annotated[Seconds, Field(gt=0, le=MAX_ASYNC_DURATION_S)] = 60.0
    stop_heartbeats_after: Annotated[Seconds, Field(ge=0)] | None = None
    fail_with: ErrorCode | None = Field(default=None, description="report failure with this code")
    duplicate_completions: int = Field(default=0, ge=0, le=5)


class SimOutage(Strict):
    """The simulated dependency is down from ``after`` (counted from when the simulation, or the
    process that plays the target, started) for ``for``: inside that window every call fails with
    a retryable error (``SIM_OUTAGE``); outside it the call succeeds."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, serialize_by_alias=True)

    after: Annotated[Seconds, Field(ge=0)]
    for_: Annotated[Seconds, Field(gt=0)] = Field(alias="for")


class SimBehavior(Strict):
    """What the built-in simulated target does. One primary behaviour; ``duration_s`` may join any."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, serialize_by_alias=True)

    ok: bool | None = None
    fail_first: int | None = Field(default=None, ge=0)
    always_fail: bool | None = None
    terminal_error: ErrorCode | None = None
    fail_rate: float | None = Field(default=None, ge=0.0, le=1.0)
    seed: int | None = None
    hang: bool | None = Field(default=None, description="sleeps until its deadline, then fails with TIMEOUT")
    stall: bool | None = Field(
        default=None,
        description="ignores its deadline and never returns: a hung dependency that only the "
        "function's own timeout ends (locally: faults.handler_timeouts: enforce)",
    )
    duration_s: float | None = Field(default=None, ge=0.0)
    async_: SimAsync | None = Field(
        default=None,
        alias="async",
        description="an asynchronous worker that heartbeats and reports completion (target.mode: async)",
    )
    outage: SimOutage | None = Field(
        default=None, description="fails (retryably) inside a window of time, succeeds outside it"
    )

    @model_validator(mode="after")
    def _one_behavior(self) -> SimBehavior:
        primary = [
            key
            for key in (
                "ok",
                "fail_first",
                "always_fail",
                "terminal_error",
                "fail_rate",
                "hang",
                "stall",
                "outage",
            )
            if getattr(self, key) not in (None, False)
        ]
        if self.async_ is not None:
            primary.append("async")
        if len(primary) > 1:
            raise ValueError(f"give one behavior, not {primary}")
        if self.seed is not None and self.fail_rate is None:
            raise ValueError("seed only applies to fail_rate")
        if not primary and self.duration_s is None:
            self.ok = True
        return self


TargetMode = Literal["sync", "async"]
MODE_DESCRIPTION = (
    "sync: the attempt ends when the call returns; async: the call starts the work, which reports "
    "heartbeats and its completion with a completion token (see heartbeat_timeout, max_duration)"
)


class SimTarget(Strict):
    type: Literal["sim"]
    name: str | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        description="the simulated dependency's identity for retry budgets (default: the task id)",
    )
    behavior: SimBehavior = Field(default_factory=lambda: SimBehavior(ok=True))
    mode: TargetMode = Field(default="sync", description=MODE_DESCRIPTION)


class LambdaTarget(Strict):
    type: Literal["lambda"]
    mode: TargetMode = Field(default="sync", description=MODE_DESCRIPTION + " (Lambda: an Event invoke)")
    function: str = Field(min_length=1, description="function name or ARN")
    qualifier: str | None = None


SECRET_REFERENCE_PATTERN = r"^(ssm:/|/|secretsmanager:|arn:aws[a-z-]*:(ssm|secretsmanager):)\S+$"
SecretReference = Annotated[
    str,
    Field(
        pattern=SECRET_REFERENCE_PATTERN,
        max_length=2048,
        description="ssm:/rebound/... (or /rebound/...), secretsmanager:NAME, or an SSM or "
        "Secrets Manager ARN",
    ),
]
_CREDENTIAL_HEADER = re.compile(
    r"^(authorization|proxy-authorization|cookie|x-amz-security-token)$|"
    r"(api[-_]?key|token|secret|password|passwd|credential|signature|auth)",
    re.IGNORECASE,
)


def is_credential_header(name: str) -> bool:
    """Whether a header name says it carries a credential (``Authorization``, ``X-Api-Key``, ...)."""
    return bool(_CREDENTIAL_HEADER.search(name))


class SecretHeader(Strict):
    """A header whose value is read from a secret at call time: ``{secret: ssm:/rebound/...}``.

    Only the reference is stored (with the task, in its runs and audit records); the value is
    read by the executor when it sends the request and is never written anywhere.
    """

    secret: SecretReference
    prefix: str = Field(
        default="", max_length=64, description="sent before the value, such as 'Bearer ' (stored as is)"
    )


class HttpTarget(Strict):
    type: Literal["http"]
    mode: TargetMode = Field(default="sync", description=MODE_DESCRIPTION)
    url: str = Field(pattern=r"^https?://", max_length=2048)
    secret: SecretReference | None = Field(
        default=None, description="SSM parameter name or Secrets Manager ARN holding the HMAC key"
    )
    headers: dict[str, str | SecretHeader] = Field(default_factory=dict)

    @field_validator("headers")
    @classmethod
    def _no_plain_credentials(cls, value: dict[str, str | SecretHeader]) -> dict[str, str | SecretHeader]:
        for name, given in value.items():
            if isinstance(given, str) and is_credential_header(name):
                raise ValueError(
                    f"headers.{name}: a credential in plain text would be stored with the task, its "
                    f"runs and its audit trail; give it by reference instead: "
                    f"{name}: {{secret: ssm:/rebound/<env>/tenants/<tenant>/...}} "
                    "(optionally with prefix: 'Bearer ')"
                )
        return value

    @property
    def host(self) -> str:
        return (urlsplit(self.url).hostname or "").lower()

    @property
    def endpoint(self) -> str:
        """Where each attempt is POSTed."""
        return self.url


PLUGIN_PATH = "/plugin/runtime/{plugin_id}/execute"
"""The plugin runtime's route a ``plugin`` target calls, under its ``url``."""


class PluginTarget(HttpTarget):
    """A plugin run by a plugin runtime: ``POST {url}/plugin/runtime/{plugin_id}/execute`` with the
    task's payload as the plugin's parameters. Everything else is the ``http`` target's: the same
    address checks, timeouts, secrets by reference, signature, idempotency key and trace context,
    and the same reading of the answer (``rebound.adapters.targets.http``)."""

    type: Literal["plugin"]  # type: ignore[assignment]
    url: str = Field(
        pattern=r"^https?://[^?#]+$", max_length=1900, description="the plugin runtime's base URL"
    )
    plugin_id: str = Field(
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$", description="the plugin the runtime runs"
    )

    @property
    def endpoint(self) -> str:
        return self.url.rstrip("/") + PLUGIN_PATH.format(plugin_id=self.plugin_id)


class TargetRules(Strict):
    """What an environment lets targets do (``targets:`` in its environment file).

    By default only ``https`` URLs whose names resolve to public addresses are called, no error
    answer is kept, and the ``sim`` target is refused; ``local`` and ``dev`` enable ``sim``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    sim: bool = Field(default=False, description="tasks may use the built-in sim target")
    plain_http_hosts: tuple[str, ...] = Field(
        default=(), description="host names or addresses that may be called over plain http"
    )
    allow_networks: tuple[str, ...] = Field(
        default=(),
        description="CIDR blocks outside the public internet that targets may reach (loopback, private)",
    )
    excerpt_hosts: tuple[str, ...] = Field(
        default=(), description="hosts whose error answers are kept (redacted) in the run's error message"
    )

    @field_validator("plain_http_hosts", "excerpt_hosts")
    @classmethod
    def _lower(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(h.strip().lower().strip("[]") for h in value)

    @field_validator("allow_networks")
    @classmethod
    def _networks(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for net in value:
            try:
                ipaddress.ip_network(net, strict=False)
            except ValueError as exc:
                raise ValueError(f"{net!r} is not a CIDR block such as 10.1.0.0/16") from exc
        return value

    @classmethod
    def defaults_for(cls, environment: str) -> TargetRules:
        """``sim`` in ``local`` and ``dev``; ``local`` also reaches loopback test servers over http."""
        if environment == "local":
            loopback = ("127.0.0.1", "localhost", "::1")
            return cls(
                sim=True,
                plain_http_hosts=loopback,
                allow_networks=("127.0.0.0/8", "::1/128"),
                excerpt_hosts=loopback,
            )
        return cls(sim=environment in SIM_ENVIRONMENTS)


SIM_ENVIRONMENTS = frozenset({"local", "dev"})


CAPACITY_PATH = "/ops/capacity/reserve"
"""The reservation service's route a ``capacity_reserve`` calls, under its ``url``."""


class CapacityReserve(HttpTarget):
    """A reservation asked of a capacity service before each attempt starts:
    ``POST {url}/ops/capacity/reserve`` with the run's ``needs`` (``rebound.engine.executor.capacity``).
    Sent as the http target sends (address checks, timeouts, secrets by reference, signature)."""

    type: Literal["capacity"] = "capacity"  # type: ignore[assignment]
    url: str = Field(
        pattern=r"^https?://[^?#]+$", max_length=1900, description="the capacity service's base URL"
    )
    needs: dict[str, Any] = Field(
        default_factory=dict, description="what the run needs, sent as is (workers, memory, a quota's name)"
    )

    @property
    def endpoint(self) -> str:
        return self.url.rstrip("/") + CAPACITY_PATH


Target = Annotated[SimTarget | LambdaTarget | HttpTarget | PluginTarget, Field(discriminator="type")]
