"""The paged scans ``rebound state`` reads the runs and work orders with: every item exactly once,
``limit`` at most per page, resumed from the cursor of the page before, on both stores."""

from __future__ import annotations

from contract_support import create, new_run, new_work_order

from rebound.engine.ports import Store


def test_runs_come_a_page_at_a_time_each_exactly_once(store: Store) -> None:
    for n in range(7):
        create(store, new_run(f"r{n}"))
    seen: list[str] = []
    cursor: str | None = None
    pages = 0
    while True:
        runs, cursor = store.scan_runs_page(limit=3, after=cursor)
        assert len(runs) <= 3
        seen += [r.run_id for r in runs]
        pages += 1
        if cursor is None:
            break
    assert sorted(seen) == [f"r{n}" for n in range(7)] and pages >= 3


def test_work_orders_come_a_page_at_a_time_each_exactly_once(store: Store) -> None:
    for n in range(5):
        uow = store.unit_of_work("test", new_work_order().opened_at)
        uow.save_work_order(None, new_work_order(f"wo-{n}"), action="opened")
        uow.commit()
    first, cursor = store.scan_work_orders_page(limit=2)
    assert len(first) <= 2 and cursor is not None
    rest: list[str] = []
    while cursor is not None:
        page, cursor = store.scan_work_orders_page(limit=2, after=cursor)
        rest += [o.work_order_id for o in page]
    assert sorted([o.work_order_id for o in first] + rest) == [f"wo-{n}" for n in range(5)]
    assert store.scan_work_orders_page(limit=10)[0][0].level is not None, "every write records a level"


def test_a_runs_expiry_is_set_once_and_only_over_the_revision_read(store: Store) -> None:
    """``rebound migrate retention``'s write: storage only, guarded by the run's revision."""
    create(store, new_run("r-exp"))
    run = store.get_run("r-exp")
    assert run is not None
    assert not store.set_run_expiry("r-exp", run.rev + 1, 1_900_000_000)  # changed since read
    assert not store.set_run_expiry("r-missing", 0, 1_900_000_000)
    assert store.set_run_expiry("r-exp", run.rev, 1_900_000_000)
    assert not store.set_run_expiry("r-exp", run.rev, 1_900_000_001)  # has one already
    assert store.get_run("r-exp") == run  # nothing of the run changed
