"""DynamoDB's TTL, played on the local cloud: items whose TTL attribute (epoch seconds) has passed
are deleted, each with a ``REMOVE`` record on the table's stream, as the service deletes them (at
no write cost, some time after they expire).

moto keeps TTL settings but deletes nothing. The runtime does not run this on its own (a scan of
every table a simulated hour would cost the simulations time for items that, at the default
retention of months, never expire in them); ``expire`` is called where expiry is the point: the
retention tests (``tests/integration/test_retention_archive.py``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from datetime import datetime
from typing import Any

from rebound import resources as r
from rebound.settings import Settings
from rebound_local import motopatch


def _expiry(item: Any, attribute: str) -> float | None:
    value = item.attrs.get(attribute)
    if value is None or value.type != "N":
        return None
    return float(value.value)


def expire(backend: Callable[[], Any], settings: Settings, now: datetime) -> Counter[str]:
    """Delete every item of every table with a TTL whose expiry is before ``now``; how many, per
    logical table."""
    deleted: Counter[str] = Counter()
    cutoff = now.timestamp()
    with motopatch.LOCK:
        for spec in r.SPEC.tables:
            if spec.ttl_attribute is None:
                continue
            table = backend().get_table(settings.table(spec.logical))
            doomed = [
                item
                for item in table.all_items()
                if (at := _expiry(item, spec.ttl_attribute)) is not None and at < cutoff
            ]
            for item in doomed:
                table.delete_item(item.hash_key, item.range_key)
            deleted[spec.logical] += len(doomed)
    return deleted
