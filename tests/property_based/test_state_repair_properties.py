"""Whatever fields of a run are overwritten (a hand edit of any shape), ``state repair`` writes back
exactly what the run's chain says, appends one record, and ``state check`` then finds nothing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from rebound.adapters.memory import MemoryStore
from rebound.domain.run import Attempt, Run, RunState, Trigger
from rebound.ops.state import StateOps

START = datetime(2026, 3, 7, 9, tzinfo=UTC)
RUN = "job:20260307T090000Z"
BOOKKEEPING = {"audit_seq", "audit_head", "rev", "updated_at"}
EDITS: dict[str, st.SearchStrategy[Any]] = {
    "state": st.sampled_from([s.value for s in RunState]),
    "attempt": st.integers(0, 9),
    "attempts": st.just([]),
    "last_error_code": st.sampled_from([None, "HTTP_500", "TIMEOUT"]),
    "dead_lettered_at": st.sampled_from([None, "2026-03-07T09:30:00Z"]),
    "work_order_id": st.sampled_from([None, "wo-x"]),
    "audit_seq": st.integers(0, 2),
    "audit_head": st.sampled_from(["0" * 64, "f" * 64]),
    "budget_start": st.integers(0, 3),
}


class Clock:
    def now(self) -> datetime:
        return START + timedelta(hours=1)


def history(store: MemoryStore, failures: int) -> None:
    """A run through ``failures`` failed attempts and a last one that succeeded."""
    run = Run(
        run_id=RUN,
        task_id="job",
        tenant="acme",
        trigger=Trigger.SCHEDULE,
        scheduled_for=START,
        created_at=START,
        updated_at=START,
    )
    uow = store.unit_of_work("executor", START)
    saved = uow.save_run(None, run, action="created")
    uow.commit()
    for n in range(1, failures + 2):
        at = START + timedelta(minutes=n)
        started = saved.model_copy(
            update={
                "state": RunState.RUNNING,
                "attempt": n,
                "attempts": [*saved.attempts, Attempt(n=n, started_at=at)],
            }
        )
        ended = RunState.FAILED if n <= failures else RunState.SUCCEEDED
        for action, after in (
            ("attempt-started", started),
            ("ended", started.model_copy(update={"state": ended})),
        ):
            uow = store.unit_of_work("executor", at)
            saved = uow.save_run(saved, after, action=action)
            uow.commit()
        if ended is RunState.FAILED:
            uow = store.unit_of_work("retry-scheduler", at)
            saved = uow.save_run(
                saved, saved.model_copy(update={"state": RunState.RETRY_SCHEDULED}), action="retry"
            )
            uow.commit()


@settings(deadline=None)  # a store write per record: timing depends on the machine's load, not the property
@given(
    failures=st.integers(0, 3),
    edits=st.dictionaries(st.sampled_from(sorted(EDITS)), st.none(), min_size=1).flatmap(
        lambda keys: st.fixed_dictionaries({k: EDITS[k] for k in keys})
    ),
)
def test_repair_restores_any_hand_edit_of_a_run_to_what_its_chain_says(
    failures: int, edits: dict[str, Any]
) -> None:
    store = MemoryStore()
    history(store, failures)
    original = dict(store._tables["runs"][RUN])
    records = len(store.audit_trail(f"run#{RUN}"))
    store._tables["runs"][RUN].update(edits)
    store._tables["runs"][RUN] = {k: v for k, v in store._tables["runs"][RUN].items() if v is not None}
    deps = SimpleNamespace(store=store, clock=Clock(), settings=SimpleNamespace(retention=None))
    ops = StateOps(deps, "operator")  # type: ignore[arg-type]

    report = ops.repair(reason="property")
    changed = any(original.get(k) != v for k, v in edits.items())
    assert report.failed == []
    assert report.repaired == ([f"run {RUN}"] if changed else [])
    assert ops.check().differences == []
    now = store._tables["runs"][RUN]
    assert {k: v for k, v in now.items() if k not in BOOKKEEPING} == {
        k: v for k, v in original.items() if k not in BOOKKEEPING
    }
    assert len(store.audit_trail(f"run#{RUN}")) == records + (1 if changed else 0)
