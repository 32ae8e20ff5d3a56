"""The completion key of asynchronous attempts, read from SSM Parameter Store or Secrets Manager.

The stack creates a generated Secrets Manager secret; the local cloud puts a random SSM
``SecureString``. Either way the functions' environment names it (``REBOUND_COMPLETION_KEY``) and
it is read through the same ``SecretResolver`` as the targets' secrets (cached, never logged).
"""

from __future__ import annotations

from rebound.adapters.secrets import SecretResolver


class SecretCompletionKeys:
    def __init__(self, secrets: SecretResolver, reference: str) -> None:
        self._secrets = secrets
        self.reference = reference

    def __repr__(self) -> str:
        return f"SecretCompletionKeys({self.reference!r})"

    def key(self) -> bytes:
        return self._secrets.get(self.reference).encode()


class StaticCompletionKey:
    """A key given in code: tests, and the simulator's in-process runs."""

    def __init__(self, key: bytes) -> None:
        if len(key) < 16:
            raise ValueError("a completion key needs at least 16 bytes")
        self._key = key

    def __repr__(self) -> str:
        return "StaticCompletionKey(***)"

    def key(self) -> bytes:
        return self._key
