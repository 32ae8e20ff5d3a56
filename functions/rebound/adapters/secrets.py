"""Secrets for targets and notification channels, from SSM Parameter Store or Secrets Manager.

A reference is a Secrets Manager ARN (``arn:aws:secretsmanager:...``) or name with the
``secretsmanager:`` prefix (``secretsmanager:rebound/prod/api-token``), or an SSM parameter name or
ARN, with or without the ``ssm:`` prefix (``ssm:/rebound/prod/slack``, ``/rebound/prod/slack``,
``arn:aws:ssm:...:parameter/...``); SSM parameters are read with decryption, so a ``SecureString``
works. Values are
kept for a short TTL so that a batch of calls does not read the same secret once per message.

A value never appears in an exception, a log line or a ``repr``; errors name the reference only.
botocore logs every response body at DEBUG, which would include a decrypted value, so while a
secret is being read this thread's records from ``botocore.parsers`` are dropped.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from rebound.adapters.errors import translate
from rebound.domain.errors import OperationalError

if TYPE_CHECKING:
    from mypy_boto3_secretsmanager import SecretsManagerClient
    from mypy_boto3_ssm import SSMClient

DEFAULT_TTL_S = 300.0
SDK_BODY_LOGGER = "botocore.parsers"

_reading = threading.local()


class _HideSecretResponses(logging.Filter):
    """Drops the SDK's debug records of a response while this thread is reading a secret."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not getattr(_reading, "active", False)


_FILTER = _HideSecretResponses()


def _install_filter() -> None:
    sdk_log = logging.getLogger(SDK_BODY_LOGGER)
    if _FILTER not in sdk_log.filters:
        sdk_log.addFilter(_FILTER)


SSM_PREFIX = "ssm:"
SECRETS_MANAGER_PREFIX = "secretsmanager:"


def is_secrets_manager(reference: str) -> bool:
    return reference.startswith(SECRETS_MANAGER_PREFIX) or (
        reference.startswith("arn:") and ":secretsmanager:" in reference
    )


def secret_id(reference: str) -> str:
    """What the service is asked for: the reference without its ``ssm:``/``secretsmanager:`` prefix."""
    for prefix in (SSM_PREFIX, SECRETS_MANAGER_PREFIX):
        if reference.startswith(prefix):
            return reference[len(prefix) :]
    return reference


class SecretResolver:
    """Resolves secret references, caching each value for ``ttl_s`` seconds.

    The clients are given as zero-argument factories and built on first use, so a function that
    never reads a Secrets Manager secret never builds that client.
    """

    def __init__(
        self,
        ssm: Callable[[], SSMClient],
        secretsmanager: Callable[[], SecretsManagerClient],
        *,
        ttl_s: float = DEFAULT_TTL_S,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._ssm_factory = ssm
        self._sm_factory = secretsmanager
        self._ssm: SSMClient | None = None
        self._sm: SecretsManagerClient | None = None
        self.ttl_s = ttl_s
        self._monotonic = monotonic
        self._cache: dict[str, tuple[float, str]] = {}
        self._lock = threading.Lock()
        _install_filter()

    def __repr__(self) -> str:
        return f"SecretResolver(cached={len(self._cache)}, ttl_s={self.ttl_s:g})"

    def get(self, reference: str) -> str:
        """The secret's value; raises ``OperationalError`` (or ``Throttled``) naming the reference."""
        if not reference:
            raise OperationalError("secret reference is empty")
        now = self._monotonic()
        with self._lock:
            hit = self._cache.get(reference)
        if hit is not None and now < hit[0]:
            return hit[1]
        value = self._fetch(reference)
        with self._lock:
            self._cache[reference] = (now + self.ttl_s, value)
        return value

    def forget(self, reference: str | None = None) -> None:
        """Drop one cached value (say, after the receiver refused it), or all of them."""
        with self._lock:
            if reference is None:
                self._cache.clear()
            else:
                self._cache.pop(reference, None)

    def _fetch(self, reference: str) -> str:
        doing = f"reading secret {reference}"
        _reading.active = True
        try:
            if is_secrets_manager(reference):
                if self._sm is None:
                    self._sm = self._sm_factory()
                resp = self._sm.get_secret_value(SecretId=secret_id(reference))
                if "SecretString" in resp:
                    value = resp["SecretString"]
                elif "SecretBinary" in resp:
                    value = resp["SecretBinary"].decode()
                else:
                    raise OperationalError(f"{doing}: the secret has no value", reference=reference)
            else:
                if self._ssm is None:
                    self._ssm = self._ssm_factory()
                value = self._ssm.get_parameter(Name=secret_id(reference), WithDecryption=True)["Parameter"][
                    "Value"
                ]
        except (ClientError, BotoCoreError) as exc:
            raise translate(exc, doing) from exc
        except UnicodeDecodeError:
            raise OperationalError(f"{doing}: the binary secret is not UTF-8", reference=reference) from None
        finally:
            _reading.active = False
        if not value:
            raise OperationalError(f"{doing}: the secret is empty", reference=reference)
        return value


TENANT_TAG = "rebound:tenant"
"""The session tag the tenant secrets role's policy reads (``${aws:PrincipalTag/rebound:tenant}``)."""
SESSION_SECONDS = 900
RENEW_BEFORE_S = 60.0


class TenantSecrets:
    """A ``SecretResolver`` per tenant, reading with credentials of the environment's tenant secrets
    role assumed with the session tag ``rebound:tenant=<tenant>``: on AWS that role may read only
    ``/rebound/<env>/tenants/${aws:PrincipalTag/rebound:tenant}/*``, so IAM holds the same line the
    executor's own check does (``rebound.domain.tenancy.secret_problem``)."""

    def __init__(
        self,
        assume_role: Callable[..., Any],
        role_arn: str,
        clients: Callable[[Mapping[str, str]], SecretResolver],
        *,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._assume_role = assume_role
        self.role_arn = role_arn
        self._clients = clients
        self._monotonic = monotonic
        self._resolvers: dict[str, tuple[float, SecretResolver]] = {}
        self._lock = threading.Lock()

    def for_tenant(self, tenant: str) -> SecretResolver:
        with self._lock:
            held = self._resolvers.get(tenant)
            if held is not None and held[0] > self._monotonic():
                return held[1]
        try:
            answer = self._assume_role(
                RoleArn=self.role_arn,
                RoleSessionName=f"rebound-secrets-{tenant}"[:64],
                DurationSeconds=SESSION_SECONDS,
                Tags=[{"Key": TENANT_TAG, "Value": tenant}],
            )
        except (ClientError, BotoCoreError) as exc:
            raise translate(exc, f"assume the tenant secrets role for tenant {tenant}") from exc
        creds = answer["Credentials"]
        resolver = self._clients(
            {
                "aws_access_key_id": creds["AccessKeyId"],
                "aws_secret_access_key": creds["SecretAccessKey"],
                "aws_session_token": creds["SessionToken"],
            }
        )
        with self._lock:
            self._resolvers[tenant] = (self._monotonic() + SESSION_SECONDS - RENEW_BEFORE_S, resolver)
        return resolver
