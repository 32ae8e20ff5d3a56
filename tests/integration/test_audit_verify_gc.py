"""``AuditOps.verify_all`` pauses the cyclic garbage collector for its bulk pass (each full
collection would walk every trail and run read so far) and leaves it as it found it: back on when
the pass ends or fails, still off if it was off."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import pytest

from rebound.engine.deps import Deps
from rebound.ops.audit import AuditOps
from support import new_run

pytestmark = pytest.mark.integration


@pytest.fixture
def collector_restored() -> Iterator[None]:
    was_on = gc.isenabled()
    yield
    if was_on:
        gc.enable()
    else:
        gc.disable()


def test_the_collector_is_off_during_the_pass_and_on_after(deps: Deps, collector_restored: None) -> None:
    for n in range(3):
        new_run(deps, f"r{n}")
    gc.enable()
    seen: list[bool] = []
    results = AuditOps(deps).verify_all(progress=lambda _r: seen.append(gc.isenabled()), segments=2)
    assert len(results) == 3 and all(r.ok for r in results)
    assert seen == [False, False, False]
    assert gc.isenabled()


def test_the_collector_is_back_on_when_a_segment_fails(
    deps: Deps, collector_restored: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    new_run(deps, "r1")

    def failing(*_args: Any) -> Iterator[Any]:
        raise RuntimeError("segment read failed")
        yield

    monkeypatch.setattr(deps.store, "runs_segment_parts", failing)
    gc.enable()
    with pytest.raises(RuntimeError, match="segment read failed"):
        AuditOps(deps).verify_all(segments=2)
    assert gc.isenabled()


def test_a_collector_found_off_stays_off(deps: Deps, collector_restored: None) -> None:
    new_run(deps, "r1")
    gc.disable()
    assert [r.ok for r in AuditOps(deps).verify_all(segments=2)] == [True]
    assert not gc.isenabled()
