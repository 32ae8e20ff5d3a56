"""Patch 10, the local audit key: its key material follows from its description.

The audit chain's MACs come from a KMS HMAC key (``rebound.adapters.audit_keys``). ``rebound local
up --state-dir`` keeps tables and queues but not KMS, so after a restart provisioning creates the
key again; with moto's random material every record written before would then fail its MAC. A key
whose description starts with ``LOCAL_AUDIT_KEY`` gets material derived from that description
instead (the environment's alias is in it), so the same environment always has the same local
key. Local only: on AWS the material never leaves KMS.

moto also gives every key, a symmetric or an HMAC one too, a fresh 2048-bit RSA private key that
only asymmetric keys use: 60 ms a key, twice in every provisioning. A key that is not an
asymmetric one shares one such key, made once per process; an RSA or ECC key gets its own.
"""

from __future__ import annotations

import hashlib
from typing import Any

LOCAL_AUDIT_KEY = "Rebound audit chain (local cloud)"


_SHARED: list[Any] = []


def _patch_kms_material() -> None:
    from moto.kms import models
    from moto.kms.models import KmsBackend

    generate = models.generate_private_key  # type: ignore[attr-defined]

    def private_key(key_spec: str) -> Any:
        if key_spec.startswith(("RSA_", "ECC_")):
            return generate(key_spec)
        if not _SHARED:
            _SHARED.append(generate(key_spec))
        return _SHARED[0]

    models.generate_private_key = private_key  # type: ignore[attr-defined]

    original = KmsBackend.create_key

    def create_key(self: Any, *args: Any, **kwargs: Any) -> Any:
        key = original(self, *args, **kwargs)
        description = str(getattr(key, "description", "") or "")
        if description.startswith(LOCAL_AUDIT_KEY):
            key.key_material = hashlib.sha256(description.encode()).digest()
        return key

    KmsBackend.create_key = create_key  # type: ignore[method-assign]
