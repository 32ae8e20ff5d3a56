"""The store in memory: the DynamoDB store's semantics (``rebound.adapters.dynamo``) without AWS.

For the engine's fast tests, and anything else that wants a ``Store`` without a cloud. Items are
kept as JSON values, as DynamoDB keeps them (a ``None`` attribute is left out), so nothing read
aliases what was written. A unit of work judges every guard against the state before it, then
writes every change, or raises ``Conflict`` naming the failed guards and writes nothing: all or
none, under one lock that every commit, write and read takes. ``events`` are the outbox events
committed, in order (what the relay would publish).
"""

from __future__ import annotations

from rebound.adapters.memory.store import Emitted, MemoryStore
from rebound.adapters.memory.unit_of_work import MemoryUnitOfWork

__all__ = ["Emitted", "MemoryStore", "MemoryUnitOfWork"]
