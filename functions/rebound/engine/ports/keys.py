"""The audit key port: MACs for the audit chain and for actors named in queue messages.

A store keys every audit record it writes with ``AuditKeys.sign`` (``rebound.domain.audit``);
``rebound audit verify`` checks them with ``AuditKeys.check``. The ops layer signs the actor it
puts in a queue message the same way, and the executor believes that actor only if it checks.

On AWS the key is a KMS HMAC key (``rebound.adapters.audit_keys.KmsAuditKeys``): for each label
(one a day) a key is derived once per process with ``GenerateMac`` and the MACs are computed
locally with it. In memory a local secret plays the KMS key (``LocalAuditKeys``).
"""

from __future__ import annotations

from typing import Protocol


class AuditKeys(Protocol):
    key_id: str
    """The key new MACs are made with (a KMS key ARN, or ``local:<name>``)."""

    def sign(self, label: str, message: bytes) -> str:
        """The MAC (hex) of ``message`` with the key derived for ``label``."""
        ...

    def day_key(self, label: str) -> bytes:
        """The key derived for ``label`` with ``key_id``: what a writer hands an auditor, who may
        only ``VerifyMac`` (``rebound audit day-keys``)."""
        ...

    def check(self, key_id: str, label: str, message: bytes, mac: str) -> bool:
        """Whether ``mac`` is ``message``'s MAC for ``label`` under ``key_id``; false for a key
        this deployment does not trust."""
        ...
