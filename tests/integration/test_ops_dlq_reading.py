"""Reading the DLQ never hides it: ``dlq list``/``show`` read the DLQ's record, not the queue.

Receiving from SQS hides what it returns from every other reader for a visibility timeout. The
listing used to peek by receiving: two listings three seconds apart showed 55 messages, then 0,
and a console polling every 5 s would have hidden messages from a running redrive. Against moto
(whose visibility timeouts run on the tests' clock, which stands still here), these tests list
twice in a row, list while a redrive holds messages, and redrive while a listing runs: every
reader sees every message and nothing is ever in flight because of a reading.
"""

from __future__ import annotations

from typing import Any

import pytest
from test_ops_redrive import OPERATOR, dead_letters

from rebound.domain.errors import MessageNotFound
from rebound.engine.deps import Deps
from rebound.engine.ports import DlqStatus, QueueCounts
from rebound.ops.dlq import DlqFilter, DlqOps, Examined

pytestmark = pytest.mark.integration


def ids(found: list[Examined]) -> list[str]:
    return [e.message.message_id for e in found]


def queue_ids(deps: Deps) -> set[str]:
    """The messages in the DLQ, read from moto's queue itself (receiving nothing)."""
    from moto.sqs.models import sqs_backends

    backend = sqs_backends["123456789012"]["us-east-1"]
    return {m.id for m in backend.get_queue(deps.settings.queue("dlq").name)._messages}


def reader(deps: Deps) -> DlqOps:
    return DlqOps(deps, "reader", wait_s=0)


def test_two_listings_in_a_row_see_every_message_and_hide_none(deps: Deps, clock: Any) -> None:
    run_ids = dead_letters(deps, 25)
    ops = reader(deps)

    def no_receive(*_: Any, **__: Any) -> Any:
        raise AssertionError("listing, showing or counting the DLQ received from it")

    ops.queue.receive = no_receive  # type: ignore[method-assign]
    meanwhile: list[list[str]] = []
    get_runs = deps.store.get_runs

    def get_runs_while_another_lists(run_ids: list[str]) -> Any:
        if not meanwhile:  # a second operator (or the console's poll) lists in the middle of the first
            meanwhile.append([])
            meanwhile[0] = ids(reader(deps).find(DlqFilter()))
        return get_runs(run_ids)

    deps.store.get_runs = get_runs_while_another_lists  # type: ignore[method-assign]

    first = ops.find(DlqFilter())
    second = ops.find(DlqFilter())  # at once: no visibility timeout has run out

    assert len(first) == 25 and ids(second) == ids(first) == meanwhile[0]
    assert {e.message.run_id for e in first} == set(run_ids)
    assert set(ids(first)) == queue_ids(deps)  # the record agrees with the queue
    assert all(e.run is not None and e.run.state.value == "dead_lettered" for e in first)
    detail = ops.show(first[0].message.message_id)
    assert detail.location == "dlq" and detail.examined.run is not None
    # ApproximateNumberOfMessagesNotVisible stays 0: nothing was received, nothing is hidden.
    assert ops.depth() == QueueCounts(visible=25, in_flight=0, delayed=0)


def test_a_listing_during_a_redrive_sees_what_the_redrive_holds_and_hides_nothing_from_it(
    deps: Deps, clock: Any
) -> None:
    dead_letters(deps, 25)
    ops = DlqOps(deps, OPERATOR, wait_s=0)
    during: list[tuple[list[str], QueueCounts]] = []
    receive = ops.queue.receive

    def receive_then_list(queue: str, *, visibility_s: int, wait_s: int = 0) -> Any:
        got = receive(queue, visibility_s=visibility_s, wait_s=wait_s)
        if got and not during:  # an operator (or the console) lists while the redrive holds a batch
            during.append((ids(reader(deps).find(DlqFilter())), reader(deps).depth()))
        return got

    ops.queue.receive = receive_then_list  # type: ignore[method-assign]

    report = ops.redrive(DlqFilter())

    [(listed, counts)] = during
    assert len(listed) == 25  # the ten the redrive holds are listed too: they are still in the DLQ
    assert counts.in_flight == 10  # only the redrive's own batch was hidden, not the listing's
    assert report.moved == 25  # and the listing hid nothing from the redrive
    assert reader(deps).find(DlqFilter()) == [] and queue_ids(deps) == set()
    marked = deps.store.get_dlq_entries(listed)
    assert {e.status for e in marked.values()} == {DlqStatus.REDRIVEN} and len(marked) == 25
    assert {e.changed_by for e in marked.values()} == {OPERATOR}


def test_a_dry_run_reads_the_record_and_leaves_the_queue_to_the_real_redrive(deps: Deps, clock: Any) -> None:
    dead_letters(deps, 12)

    dry = DlqOps(deps, OPERATOR, wait_s=0).redrive(DlqFilter(), dry_run=True)
    real = DlqOps(deps, OPERATOR, wait_s=0).redrive(DlqFilter())  # right after the count it was shown

    assert dry.outcomes == {"would-move": 12} and dry.sqs_requests == 0
    assert real.outcomes == {"moved": 12}


def test_listing_pages_through_the_record_with_a_cursor(deps: Deps, clock: Any) -> None:
    dead_letters(deps, 25)
    everything = ids(reader(deps).find(DlqFilter()))

    pages: list[str] = []
    after = None
    while True:
        page = reader(deps).find_page(DlqFilter(task_id="job"), limit=10, after=after)
        pages += ids(page.examined)
        if page.cursor is None:
            break
        after = page.cursor

    assert pages == everything
    assert ids(reader(deps).find(DlqFilter(), limit=7)) == everything[:7]
    assert reader(deps).find(DlqFilter(task_id="other")) == []


def test_a_message_that_left_is_not_shown_and_says_how_it_left(deps: Deps, clock: Any) -> None:
    dead_letters(deps, 1)
    [message] = reader(deps).find(DlqFilter())

    DlqOps(deps, OPERATOR, wait_s=0).redrive(DlqFilter())

    with pytest.raises(MessageNotFound, match=r"it left the DLQ \(redriven at .*assumed-role/oncall/alice\)"):
        reader(deps).show(message.message.message_id)
