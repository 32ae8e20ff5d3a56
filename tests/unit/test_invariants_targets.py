"""The simulator's invariant on targets' work orders fails when its rule is broken."""

from __future__ import annotations

import pytest

from rebound_local.invariants_orders import target_orders_close

pytestmark = pytest.mark.unit

ORDER = {"work_order_id": "wo-1", "subject": "target#sim:db#1", "state": "resolved"}


def test_a_target_work_order_left_open_breaks_the_invariant() -> None:
    assert target_orders_close([ORDER], []).ok
    broken = target_orders_close([{**ORDER, "state": "open"}], [])
    assert not broken.ok and "still open" in broken.examples[0]


def test_a_run_linked_to_a_target_work_order_breaks_the_invariant() -> None:
    broken = target_orders_close([ORDER], [{"run_id": "r1", "work_order_id": "wo-1"}])
    assert not broken.ok and "r1" in broken.examples[0]
    assert target_orders_close([ORDER], [{"run_id": "r1", "work_order_id": "wo-2"}]).ok
