"""The audit key port (``rebound.engine.ports.AuditKeys``) on KMS, and in memory.

Both derive one key per label (one a day, ``rebound.domain.audit.mac_label``) and compute the
MACs locally with HMAC-SHA256. On KMS the derived key is ``GenerateMac(label)`` with the
environment's HMAC key: one KMS call per label per process, instead of one per audit record
(the reasoning is in ``docs/security.md``, *The keyed audit chain*). Whoever may call
``GenerateMac`` on that key can sign; the key policy gives that right to the writer roles only.

An auditor may only call ``VerifyMac`` (``VerifyingAuditKeys``): it cannot derive a day's key, so a
writer hands it the day keys (``day_keys_document``), and it accepts each one only after KMS
``VerifyMac`` says it is the audit key's MAC of that day's label. A wrong or forged day key is
refused, so the auditor does not have to trust whoever handed the keys over.
"""

from __future__ import annotations

import hashlib
import hmac
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from rebound.adapters.errors import error_code, translate
from rebound.domain.errors import ValidationFailed
from rebound.engine.ports import AuditKeys

MAC_ALGORITHM = "HMAC_SHA_256"
DAY_KEYS_FORMAT = "rebound-audit-day-keys/v1"
"""The ``format`` of a day-keys document (``day_keys_document``, ``read_day_keys``)."""


def _mac(key: bytes, message: bytes) -> str:
    """HMAC-SHA256 of ``message``, in hex.

    Not ``hmac.digest``: CPython's one-shot HMAC lets go of the GIL for every message, however
    short, so in a process whose other threads are busy (a batch's messages run in threads, and
    ``audit verify --all`` reads 16 segments at once) each MAC waited for the interpreter's switch
    interval, about 5 ms, to get it back. An HMAC object lets go of it only for long messages; a
    record's MAC is made over its hash, some 80 bytes (``tests/unit/test_audit_keys.py``)."""
    return hmac.new(key, message, "sha256").hexdigest()


DERIVATION_WAIT_S = 0.005
"""How long a thread waits between two looks at a key another thread is deriving."""


class DerivedKeys:
    """MACs with keys derived per label by ``derive(key_id, label)``, each derived once."""

    def __init__(
        self,
        key_id: str,
        derive: Callable[[str, str], bytes],
        trusted: Iterable[str] = (),
        pause: Callable[[float], None] = time.sleep,
    ) -> None:
        """``pause(seconds)``: how a thread waits while another derives the key it needs (the
        engine's clock: ``Clock.sleep``)."""
        self.key_id = key_id
        self._derive = derive
        self._trusted = frozenset({key_id, *trusted})
        self._pause = pause
        self._keys: dict[tuple[str, str], bytes] = {}
        self._deriving: dict[tuple[str, str], threading.Lock] = {}
        self._lock = threading.Lock()

    def _key(self, key_id: str, label: str) -> bytes:
        # Read without a lock (one ``dict.get`` is atomic; a record verified takes a key each
        # time). A key not yet derived is derived under that label's own lock, after looking
        # again: threads that need a new day's key at once make one ``GenerateMac`` between them,
        # and a derivation of one day does not hold up another's. A thread that finds the label's
        # lock taken waits on the clock, not on the lock: the deriving thread's KMS call may itself
        # wait on that clock (the local runtime's virtual clock moves only when no thread it counts
        # is working, and a thread blocked on a lock would count as working for good).
        key = self._keys.get((key_id, label))
        if key is None:
            with self._lock:
                lock = self._deriving.setdefault((key_id, label), threading.Lock())
            while not lock.acquire(blocking=False):
                self._pause(DERIVATION_WAIT_S)
            try:
                key = self._keys.get((key_id, label))
                if key is None:
                    key = self._keys[(key_id, label)] = self._derive(key_id, label)
            finally:
                lock.release()
        return key

    def sign(self, label: str, message: bytes) -> str:
        return _mac(self._key(self.key_id, label), message)

    def day_key(self, label: str) -> bytes:
        """The key derived for ``label`` with this deployment's key (what a writer hands an auditor)."""
        return self._key(self.key_id, label)

    def check(self, key_id: str, label: str, message: bytes, mac: str) -> bool:
        if key_id not in self._trusted:
            return False
        expected = _mac(self._key(key_id, label), message)
        return hmac.compare_digest(expected, mac)


class KmsAuditKeys(DerivedKeys):
    """Keys derived with KMS ``GenerateMac`` (HMAC_SHA_256) of the environment's HMAC key.

    ``trusted`` names earlier keys whose records still verify (KMS does not rotate HMAC keys:
    a new key is a new id, and the old one stays trusted for its records)."""

    def __init__(
        self,
        client: Any,
        key_id: str,
        trusted: Iterable[str] = (),
        pause: Callable[[float], None] = time.sleep,
    ) -> None:
        def derive(key: str, label: str) -> bytes:
            try:
                answer = client.generate_mac(KeyId=key, Message=label.encode(), MacAlgorithm=MAC_ALGORITHM)
            except (ClientError, BotoCoreError) as exc:
                raise translate(exc, f"derive the audit key for {label} from {key}") from exc
            return bytes(answer["Mac"])

        super().__init__(key_id, derive, trusted, pause)


class LocalAuditKeys(DerivedKeys):
    """Keys derived from a local secret: the in-memory store's stand-in for the KMS key."""

    def __init__(self, secret: bytes = b"rebound-memory-audit-key", name: str = "memory") -> None:
        def derive(_key: str, label: str) -> bytes:
            return hmac.new(secret, label.encode(), hashlib.sha256).digest()

        super().__init__(f"local:{name}", derive)


class VerifyingAuditKeys(DerivedKeys):
    """An auditor's keys: it may call KMS ``VerifyMac`` on the audit key and nothing else.

    ``supplied`` maps ``(key id, label)`` to the day key a writer exported (``read_day_keys``).
    Each is used only once ``VerifyMac(key id, label, day key)`` holds, that is once KMS confirms it
    is the key ``GenerateMac`` derives for that label: one KMS call per day covered, none per
    record. A day the supplied keys do not cover, or a day key KMS does not confirm, is refused
    with the day named (``ValidationFailed``). It never signs."""

    def __init__(
        self,
        client: Any,
        key_id: str,
        supplied: Mapping[tuple[str, str], bytes],
        trusted: Iterable[str] = (),
        source: str = "the day keys",
    ) -> None:
        def derive(key: str, label: str) -> bytes:
            candidate = supplied.get((key, label))
            if candidate is None:
                raise ValidationFailed(
                    f"{source} hold no key for {label} (key {key}): export the days the trail covers "
                    "with `rebound audit day-keys` as a writer",
                    key_path=label,
                )
            try:
                answer = client.verify_mac(
                    KeyId=key, Message=label.encode(), Mac=candidate, MacAlgorithm=MAC_ALGORITHM
                )
            except ClientError as exc:
                if error_code(exc) != "KMSInvalidMacException":
                    raise translate(exc, f"verify the day key for {label} with {key}") from exc
                answer = {"MacValid": False}
            except BotoCoreError as exc:
                raise translate(exc, f"verify the day key for {label} with {key}") from exc
            if not answer.get("MacValid"):
                raise ValidationFailed(
                    f"{source}: the key given for {label} is not the audit key's (KMS VerifyMac refused "
                    f"it for {key}): it was altered or made with another key",
                    key_path=label,
                )
            return candidate

        super().__init__(key_id, derive, trusted)

    def sign(self, label: str, message: bytes) -> str:
        raise ValidationFailed(
            "these audit keys only verify (an auditor's VerifyMac): nothing can be written with them",
            key_path="audit_keys",
        )


def day_keys_document(keys: AuditKeys, labels: Iterable[str]) -> dict[str, Any]:
    """The day keys of ``labels`` under ``keys``' own key, as a writer hands them to an auditor.

    Whoever holds them can compute that day's MACs: keep the document as secret as the right to
    ``GenerateMac`` (``docs/security.md``, *Verifying without GenerateMac*)."""
    return {
        "format": DAY_KEYS_FORMAT,
        "keys": [
            {"key_id": keys.key_id, "label": label, "key": keys.day_key(label).hex()} for label in labels
        ],
    }


def read_day_keys(document: Any, source: str) -> dict[tuple[str, str], bytes]:
    """The ``(key id, label) -> day key`` map of a day-keys document; bad input names ``source``
    and the entry."""
    if not isinstance(document, dict) or document.get("format") != DAY_KEYS_FORMAT:
        raise ValidationFailed(
            f"{source}: not a day-keys document (format {DAY_KEYS_FORMAT})", key_path="format"
        )
    entries = document.get("keys")
    if not isinstance(entries, list):
        raise ValidationFailed(f"{source}: keys must be a list", key_path="keys")
    found: dict[tuple[str, str], bytes] = {}
    for index, entry in enumerate(entries):
        where = f"keys[{index}]"
        if not isinstance(entry, dict) or not all(
            isinstance(entry.get(name), str) and entry.get(name) for name in ("key_id", "label", "key")
        ):
            raise ValidationFailed(f"{source}: {where} needs key_id, label and key (strings)", key_path=where)
        try:
            found[(entry["key_id"], entry["label"])] = bytes.fromhex(entry["key"])
        except ValueError as exc:
            raise ValidationFailed(f"{source}: {where}.key is not hex", key_path=f"{where}.key") from exc
    return found
