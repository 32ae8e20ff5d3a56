"""The store contract, the DLQ's record: recorded with the change that put a message in the DLQ
(all or nothing), found without one and recorded once, listed oldest first from an index with
filters, the queue's retention and a cursor, marked when the message leaves."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from contract_support import at, create, new_run

from rebound.domain.errors import Conflict, ValidationFailed
from rebound.domain.timefmt import iso
from rebound.engine.dlq_record import dlq_entry, millis
from rebound.engine.ports import DlqEntry, DlqQuery, DlqStatus, Store
from rebound.resources import DLQ_RETENTION_S
from support import START

pytestmark = pytest.mark.contract


def entry(
    message_id: str,
    seconds: float,
    *,
    task_id: str = "t",
    tenant: str = "acme",
    error_code: str = "BOOM",
    run_id: str | None = None,
) -> DlqEntry:
    """The record of an explicit dead letter's message, dead-lettered ``seconds`` after START."""
    when = at(seconds)
    return dlq_entry(
        message_id=message_id,
        body='{"v": 1, "kind": "replay"}',
        attributes={
            "run_id": run_id or f"run-{message_id}",
            "task_id": task_id,
            "tenant": tenant,
            "attempts": 3,
            "error_code": error_code,
            "reason": "attempts_exhausted",
            "dead_lettered_at": iso(when),
        },
        sent_at_ms=millis(when),
        actor="test",
    )


def listed(store: Store, **query: object) -> list[str]:
    return [e.message_id for e in store.dlq_entries(DlqQuery(**query)).entries]  # type: ignore[arg-type]


def record(store: Store, *entries: DlqEntry) -> None:
    for one in entries:
        assert store.add_dlq_entry(one)


def test_a_message_is_recorded_with_the_change_that_names_it_or_not_at_all(store: Store) -> None:
    run = create(store, new_run())
    message = entry("m1", 60, run_id=run.run_id)
    uow = store.unit_of_work("test", at(60))
    uow.save_run(run, run.model_copy(update={"dlq_message_id": "m1"}), action="dlq-message-sent")
    uow.record_dlq_entry(message)
    uow.commit()
    assert store.get_dlq_entry("m1") == message

    stale = store.unit_of_work("test", at(70))  # guarded by a run read before the write above
    stale.save_run(run, run.model_copy(update={"dlq_message_id": "m2"}), action="dlq-message-sent")
    stale.record_dlq_entry(entry("m2", 70))
    with pytest.raises(Conflict):
        stale.commit()
    assert store.get_dlq_entry("m2") is None and listed(store) == ["m1"]


def test_the_record_keeps_what_describes_the_message(store: Store) -> None:
    message = entry("m1", 60)
    record(store, message)
    got = store.get_dlq_entry("m1")
    assert got == message and got is not None
    assert (got.at, got.status, got.attempts, got.error_code) == (at(60), DlqStatus.IN_DLQ, 3, "BOOM")
    assert got.attributes["attempts"] == "3"  # as SQS hands attributes back: text
    assert got.attributes["dead_lettered_at"] == "2026-03-07T09:01:00.000Z"
    assert store.get_dlq_entry("nope") is None


def test_a_message_found_without_a_record_is_recorded_once(store: Store) -> None:
    first = entry("m1", 60)
    assert store.add_dlq_entry(first) is True
    assert store.add_dlq_entry(replace(first, reason="another")) is False  # the first record is kept
    assert store.get_dlq_entry("m1") == first


def test_records_are_read_in_a_batch(store: Store) -> None:
    record(store, entry("m1", 1), entry("m2", 2), entry("m3", 3))
    assert set(store.get_dlq_entries(["m1", "nope", "m3", "m1"])) == {"m1", "m3"}
    assert store.get_dlq_entries([]) == {}


def test_the_dlq_is_listed_oldest_first_with_filters(store: Store) -> None:
    record(
        store,
        entry("c", 180, task_id="ledger"),
        entry("a", 60, task_id="billing", tenant="globex", error_code="BAD_INPUT"),
        entry("d", 240, task_id="billing", tenant="globex"),
        entry("b", 120, task_id="ledger", error_code="BAD_INPUT"),
    )
    assert listed(store) == ["a", "b", "c", "d"]
    assert listed(store, task_id="billing") == ["a", "d"]
    assert listed(store, tenant="globex") == ["a", "d"]
    assert listed(store, error_code="BAD_INPUT") == ["a", "b"]
    assert listed(store, task_id="ledger", error_code="BOOM") == ["c"]
    assert listed(store, since=at(120)) == ["b", "c", "d"]  # both bounds included
    assert listed(store, until=at(180)) == ["a", "b", "c"]
    assert listed(store, since=at(120), until=at(180), task_id="ledger") == ["b", "c"]
    assert listed(store, task_id="nobody") == []


def test_pages_follow_their_cursor_to_the_end(store: Store) -> None:
    record(store, *(entry(f"m{n:02d}", n, task_id="t" if n % 2 else "u") for n in range(25)))
    seen: list[str] = []
    after = None
    for _ in range(10):
        page = store.dlq_entries(DlqQuery(limit=10, after=after))
        seen += [e.message_id for e in page.entries]
        if page.cursor is None:
            break
        after = page.cursor
    assert seen == [f"m{n:02d}" for n in range(25)]
    first = store.dlq_entries(DlqQuery(task_id="t", tenant="acme", limit=5))
    rest = store.dlq_entries(DlqQuery(task_id="t", tenant="acme", limit=50, after=first.cursor))
    assert [e.message_id for e in first.entries + rest.entries] == [f"m{n:02d}" for n in range(1, 25, 2)]
    assert first.cursor is not None and rest.cursor is None
    exact = store.dlq_entries(DlqQuery(limit=25))
    assert len(exact.entries) == 25 and exact.cursor is None  # no empty page after the last


def test_what_the_queues_retention_dropped_is_not_listed(store: Store) -> None:
    record(store, entry("old", 0), entry("new", 3600))
    dropped = START + timedelta(seconds=DLQ_RETENTION_S + 60)
    assert listed(store, present_at=START + timedelta(days=1)) == ["old", "new"]
    assert listed(store, present_at=dropped) == ["new"]


def test_a_message_that_leaves_is_marked_and_no_longer_listed(store: Store) -> None:
    record(store, entry("a", 1, task_id="ledger"), entry("b", 2, task_id="ledger"), entry("c", 3))
    store.mark_dlq_entries(["a", "c"], DlqStatus.REDRIVEN, at=at(600), actor="alice")
    assert listed(store) == ["b"] and listed(store, task_id="ledger") == ["b"]
    gone = store.get_dlq_entry("a")
    assert gone is not None and (gone.status, gone.changed_at, gone.changed_by) == (
        DlqStatus.REDRIVEN,
        at(600),
        "alice",
    )
    assert gone.body and gone.task_id == "ledger"  # what it was stays readable


def test_what_left_is_listed_by_how_it_left_and_since_when(store: Store) -> None:
    record(store, *(entry(m, n) for n, m in enumerate(["a", "b", "c", "d", "e"], start=1)))
    store.mark_dlq_entries(["a", "b"], DlqStatus.REDRIVEN, at=at(600), actor="alice")
    store.mark_dlq_entries(["c"], DlqStatus.REDRIVEN, at=at(1200), actor="alice")
    store.mark_dlq_entries(["d"], DlqStatus.ARCHIVED, at=at(1200), actor="bob")
    assert listed(store) == ["e"]
    assert listed(store, status=DlqStatus.REDRIVEN) == ["a", "b", "c"]
    assert listed(store, status=DlqStatus.ARCHIVED) == ["d"]
    assert listed(store, status=DlqStatus.DELETED) == []
    assert listed(store, status=DlqStatus.REDRIVEN, changed_since=at(1200)) == ["c"]  # included
    assert listed(store, status=DlqStatus.REDRIVEN, changed_since=at(1201)) == []
    assert listed(store, status=DlqStatus.REDRIVEN, since=at(2), changed_since=at(600)) == ["b", "c"]
    first = store.dlq_entries(DlqQuery(status=DlqStatus.REDRIVEN, changed_since=at(600), limit=2))
    rest = store.dlq_entries(DlqQuery(status=DlqStatus.REDRIVEN, changed_since=at(600), after=first.cursor))
    assert [e.message_id for e in first.entries + rest.entries] == ["a", "b", "c"]
    with pytest.raises(ValidationFailed, match="task_id"):
        DlqQuery(task_id="t", status=DlqStatus.REDRIVEN)  # by_task holds only what is in the DLQ


def test_spans_are_what_the_same_query_lists_reduced_to_arrival_status_and_departure(store: Store) -> None:
    record(store, *(entry(m, n) for n, m in enumerate(["a", "b", "c"], start=1)))
    store.mark_dlq_entries(["a"], DlqStatus.REDRIVEN, at=at(600), actor="alice")
    for query in (
        DlqQuery(),
        DlqQuery(status=DlqStatus.REDRIVEN, changed_since=at(600)),
        DlqQuery(limit=1),
        DlqQuery(limit=1, after=store.dlq_entries(DlqQuery(limit=1)).cursor),
    ):
        page, spans = store.dlq_entries(query), store.dlq_spans(query)
        assert spans.cursor == page.cursor
        assert [(s.arrived, s.status, s.changed_at) for s in spans.spans] == [
            (e.at, e.status, e.changed_at) for e in page.entries
        ]
    still = store.dlq_spans(DlqQuery()).spans
    assert [s.expires_at for s in still] == [at(n) + timedelta(seconds=DLQ_RETENTION_S) for n in (2, 3)]


def test_a_message_marked_before_it_was_recorded_stays_gone(store: Store) -> None:
    store.mark_dlq_entries(["late"], DlqStatus.DELETED, at=at(5), actor="sweeper")
    assert store.add_dlq_entry(entry("late", 1)) is False  # a late record cannot put it back
    gone = store.get_dlq_entry("late")
    assert gone is not None and gone.status is DlqStatus.DELETED and gone.at == at(5)
    assert listed(store) == []
