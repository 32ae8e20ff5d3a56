"""The store contract: every test here runs on each ``Store`` (``store`` is parametrized).

``dynamo``: ``DynamoStore`` on moto, with every table provisioned (the ``aws`` and ``settings``
fixtures of ``tests/conftest.py``). ``memory``: ``MemoryStore``. ``outbox`` lists the outbox
events a store committed, whichever it is.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from contract_support import Event

from rebound.adapters.audit_keys import KmsAuditKeys
from rebound.adapters.dynamo import DynamoStore, from_item
from rebound.adapters.memory import MemoryStore
from rebound.engine.ports import Store

STORES = ("dynamo", "memory")


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest) -> Store:
    if request.param == "memory":
        memory: Store = MemoryStore()  # a MemoryStore is a Store wherever one is expected
        return memory
    aws = request.getfixturevalue("aws")
    settings = request.getfixturevalue("settings")
    keys = KmsAuditKeys(aws.client("kms"), settings.audit_key_id or "")
    return DynamoStore(
        aws.client("dynamodb"), settings.tables, settings.event_source, sleep=lambda _: None, audit_keys=keys
    )


@pytest.fixture
def outbox(store: Store) -> Callable[[], list[Event]]:
    """The outbox events committed so far, oldest first (by creation time, then id)."""

    def events() -> list[Event]:
        if isinstance(store, MemoryStore):
            found = [
                Event(e.event_id, e.detail_type, e.subject, e.created_at, e.detail) for e in store.events
            ]
        else:
            assert isinstance(store, DynamoStore)
            items = store.client.scan(TableName=store.tables["outbox"])["Items"]
            found = [
                Event(d["event_id"], d["detail_type"], d["subject"], d["created_at"], json.loads(d["detail"]))
                for d in map(from_item, items)
            ]
        return sorted(found, key=lambda e: (e.created_at, e.event_id))

    return events
