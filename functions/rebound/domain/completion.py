"""Completion tokens: the credential an asynchronous attempt's work reports with.

A token is ``<claims>.<signature>``: the claims (run id, attempt, token id, expiry) as URL-safe
base64 of canonical JSON, and an HMAC-SHA256 of them under the environment's completion key. It is
scoped to one (run, attempt) and expires at the attempt's ``max_duration`` plus a grace period.
Single use is not the token's own doing: the run names the id of its one live token
(``Run.async_token_id``) and a completion or failure clears it in the same conditional write, so
a token used once is refused after (``rebound.engine.async_reports``).

No I/O here: the key comes from the caller (``rebound.engine.ports.CompletionKeys``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from rebound.domain.errors import ReboundError
from rebound.domain.jsonutil import canonical_bytes
from rebound.domain.timefmt import iso, parse_utc

ASYNC_PAYLOAD_KEY = "rebound"
"""The key of the payload's block for asynchronous work: its completion token, run and attempt."""
TOKEN_VERSION = 1
MAX_TOKEN_CHARS = 2048


class Refusal(StrEnum):
    """Why a report was refused. Each is one answer to the worker and one audit record."""

    MALFORMED = "malformed"  # not a token at all
    BAD_SIGNATURE = "bad_signature"  # not signed by this environment's key
    EXPIRED = "expired"  # past its expiry
    OTHER_RUN = "other_run"  # the token names another run than the one addressed
    UNKNOWN_RUN = "unknown_run"
    OTHER_ATTEMPT = "other_attempt"  # the run has moved on to another attempt
    USED = "used"  # the attempt already completed or failed with this token
    TIMED_OUT = "timed_out"  # the attempt timed out before the report arrived (a late completion)
    NOT_RUNNING = "not_running"  # the run ended another way (cancelled, skipped ...)


class TokenRefused(ReboundError):
    """A completion token or report that cannot be accepted; ``reason`` says why."""

    code = "TOKEN_REFUSED"
    http_status = 409

    def __init__(self, reason: Refusal, message: str, **details: object) -> None:
        super().__init__(message, reason=reason.value, **details)
        self.reason = reason


@dataclass(frozen=True)
class Claims:
    run_id: str
    attempt: int
    token_id: str
    expires_at: datetime


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def token_id_for(run_id: str, attempt: int) -> str:
    """The token id of (run, attempt): attempts are never renumbered, so it names one attempt."""
    return hashlib.sha256(f"{run_id}#{attempt}".encode()).hexdigest()[:24]


def sign(key: bytes, claims: Claims) -> str:
    body = canonical_bytes(
        {
            "v": TOKEN_VERSION,
            "run": claims.run_id,
            "att": claims.attempt,
            "tid": claims.token_id,
            "exp": iso(claims.expires_at),
        }
    )
    mac = hmac.new(key, body, hashlib.sha256).digest()
    return f"{_b64(body)}.{_b64(mac)}"


def verify(key: bytes, token: str, now: datetime) -> Claims:
    """The token's claims if it is well formed, signed with ``key`` and not expired."""
    if not isinstance(token, str) or not token or len(token) > MAX_TOKEN_CHARS or token.count(".") != 1:
        raise TokenRefused(Refusal.MALFORMED, "not a completion token (expected <claims>.<signature>)")
    body_part, mac_part = token.split(".")
    try:
        body = _unb64(body_part)
        mac = _unb64(mac_part)
    except (binascii.Error, ValueError):
        raise TokenRefused(Refusal.MALFORMED, "not a completion token (bad base64)") from None
    if not hmac.compare_digest(mac, hmac.new(key, body, hashlib.sha256).digest()):
        raise TokenRefused(Refusal.BAD_SIGNATURE, "the completion token's signature does not verify")
    try:
        data = json.loads(body)
        claims = Claims(
            run_id=str(data["run"]),
            attempt=int(data["att"]),
            token_id=str(data["tid"]),
            expires_at=parse_utc(str(data["exp"])),
        )
    except (ValueError, KeyError, TypeError):
        raise TokenRefused(Refusal.MALFORMED, "the completion token's claims are not readable") from None
    if now >= claims.expires_at:
        raise TokenRefused(
            Refusal.EXPIRED,
            f"the completion token expired at {iso(claims.expires_at)}",
            run_id=claims.run_id,
            attempt=claims.attempt,
        )
    return claims
