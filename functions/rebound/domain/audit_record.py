"""One record of an audit chain (the chain itself: ``rebound.domain.audit``)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from rebound.domain.timefmt import UtcDatetime


class AuditRecord(BaseModel):
    """One link of a subject's hash chain. ``hash`` covers every other field but ``mac``; ``mac``
    is the keyed MAC of ``hash``."""

    subject: str
    seq: int = Field(ge=1)
    at: UtcDatetime
    actor: str
    action: str
    from_state: str | None = None
    to_state: str | None = None
    evidence: dict[str, Any] = Field(default_factory=dict)
    prev_hash: str
    hash: str
    mac_alg: str | None = None
    """How ``mac`` was made (``rebound.domain.audit.MAC_ALG``); ``None``: an unkeyed record,
    written before the chain was keyed."""
    mac_key: str | None = None
    """The key ``mac`` was derived from (a KMS key ARN, or ``local:<name>``)."""
    mac: str | None = None
    """HMAC-SHA256 of ``hash`` (which covers every other field), with the key of the record's day
    (``rebound.domain.audit``)."""
