"""What the cost bench says a run leaves in DynamoDB: each item's size and DynamoDB's 100-byte
overhead, once in its table and once more in each index whose keys it has (a keys-only index: its
keys alone)."""

from __future__ import annotations

import pytest

from rebound.engine.deps import Deps
from rebound_local import observe
from rebound_local.bench.cost import storage_per_million
from rebound_local.bill_units import item_size
from rebound_local.cloud import LocalCloud
from support import new_run

pytestmark = pytest.mark.integration


def test_a_run_is_stored_once_in_its_table_and_once_in_each_index(deps: Deps) -> None:
    new_run(deps, "r1")
    [item] = deps.store.client.scan(TableName=deps.settings.table("runs"))["Items"]
    stored = observe.stored_bytes(LocalCloud, deps.settings, 100)  # type: ignore[arg-type]
    one = item_size(item) + 100
    keys = {k: item[k] for k in ("run_id", "task_id", "scheduled_for")}
    assert stored["runs"] == stored["runs.by_state"] == one
    assert stored["runs.by_task_keys"] == item_size(keys) + 100 < one
    assert stored["audit"] > 0 and stored["workorders"] == 0


def test_storage_per_million_counts_only_the_tables_kept_for_ever() -> None:
    section = {
        "runs": 10,
        "stored_bytes": {
            "runs": 10_000,
            "runs.by_task_keys": 10_000,
            "audit": 20_000,
            "outbox": 99_999,
            "control": 5,
        },
    }
    storage = storage_per_million(section)
    assert storage["bytes_per_run"] == 4000.0
    assert storage["gb"] == round(4000 * 1e6 / 1024**3, 3)
    assert storage["dollars_per_month"] == round(4000 * 1e6 / 1024**3 * 0.25, 3)
