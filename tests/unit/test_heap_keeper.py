"""``rebound_local.heap.HeapKeeper``: what survives a collection moves out of the collector's way
when it starts and again once a period; cyclic garbage is collected first, never frozen; ``stop``
ends its thread, unfreezes everything and puts the collector's thresholds back."""

from __future__ import annotations

import gc
import threading
import time
import weakref

import pytest

from rebound_local.heap import THRESHOLDS, HeapKeeper

pytestmark = pytest.mark.unit


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def test_starting_freezes_what_survives_and_stopping_unfreezes_it() -> None:
    kept = [{"item": n} for n in range(100)]
    keeper = HeapKeeper(period_s=3600).start()
    try:
        assert gc.get_freeze_count() >= len(kept)
        assert any(t.name == "heap-keeper" for t in threading.enumerate())
    finally:
        keeper.stop()
    assert gc.get_freeze_count() == 0
    assert not any(t.name == "heap-keeper" for t in threading.enumerate())


def test_cyclic_garbage_is_collected_not_frozen() -> None:
    a, b = _Node(), _Node()
    a.other, b.other = b, a
    gone = weakref.ref(a)
    del a, b
    keeper = HeapKeeper(period_s=3600).start()
    try:
        assert gone() is None
    finally:
        keeper.stop()


def test_it_keeps_again_once_a_period() -> None:
    keeper = HeapKeeper(period_s=0.01).start()
    try:
        deadline = time.monotonic() + 30
        while keeper.freezes < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert keeper.freezes >= 3
    finally:
        keeper.stop()
    assert gc.get_freeze_count() == 0


def test_it_raises_the_thresholds_while_it_runs_and_puts_them_back() -> None:
    before = gc.get_threshold()
    keeper = HeapKeeper(period_s=3600).start()
    try:
        assert gc.get_threshold() == THRESHOLDS
        assert THRESHOLDS[0] > before[0]
    finally:
        keeper.stop()
    assert gc.get_threshold() == before
