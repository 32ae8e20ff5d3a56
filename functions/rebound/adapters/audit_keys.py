"""The audit key port (``rebound.engine.ports.AuditKeys``) on KMS, and in memory.

Both derive one key per label (one a day, ``rebound.domain.audit.mac_label``) and compute the
MACs locally with HMAC-SHA256. On KMS the derived key is ``GenerateMac(label)`` with the
environment's HMAC key: one KMS call per label per process, instead of one per audit record
(the reasoning is in ``docs/security.md``, *The keyed audit chain*). Whoever may call
``GenerateMac`` on that key can sign; the key policy gives that right to the writer roles only.
"""

from __future__ import annotations

import hashlib
import hmac
import threading
from collections.abc import Callable, Iterable
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from rebound.adapters.errors import translate

MAC_ALGORITHM = "HMAC_SHA_256"


class DerivedKeys:
    """MACs with keys derived per label by ``derive(key_id, label)``, each derived once."""

    def __init__(self, key_id: str, derive: Callable[[str, str], bytes], trusted: Iterable[str] = ()) -> None:
        self.key_id = key_id
        self._derive = derive
        self._trusted = frozenset({key_id, *trusted})
        self._keys: dict[tuple[str, str], bytes] = {}
        self._lock = threading.Lock()

    def _key(self, key_id: str, label: str) -> bytes:
        with self._lock:
            key = self._keys.get((key_id, label))
        if key is None:
            key = self._derive(key_id, label)
            with self._lock:
                self._keys[(key_id, label)] = key
        return key

    def sign(self, label: str, message: bytes) -> str:
        return hmac.new(self._key(self.key_id, label), message, hashlib.sha256).hexdigest()

    def check(self, key_id: str, label: str, message: bytes, mac: str) -> bool:
        if key_id not in self._trusted:
            return False
        expected = hmac.new(self._key(key_id, label), message, hashlib.sha256).hexdigest()
        return hmac.compare_digest(expected, mac)


class KmsAuditKeys(DerivedKeys):
    """Keys derived with KMS ``GenerateMac`` (HMAC_SHA_256) of the environment's HMAC key.

    ``trusted`` names earlier keys whose records still verify (KMS does not rotate HMAC keys:
    a new key is a new id, and the old one stays trusted for its records)."""

    def __init__(self, client: Any, key_id: str, trusted: Iterable[str] = ()) -> None:
        def derive(key: str, label: str) -> bytes:
            try:
                answer = client.generate_mac(KeyId=key, Message=label.encode(), MacAlgorithm=MAC_ALGORITHM)
            except (ClientError, BotoCoreError) as exc:
                raise translate(exc, f"derive the audit key for {label} from {key}") from exc
            return bytes(answer["Mac"])

        super().__init__(key_id, derive, trusted)


class LocalAuditKeys(DerivedKeys):
    """Keys derived from a local secret: the in-memory store's stand-in for the KMS key."""

    def __init__(self, secret: bytes = b"rebound-memory-audit-key", name: str = "memory") -> None:
        def derive(_key: str, label: str) -> bytes:
            return hmac.new(secret, label.encode(), hashlib.sha256).digest()

        super().__init__(f"local:{name}", derive)
