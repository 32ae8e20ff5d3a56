"""The simulator's invariant that a run's work order closes when the run recovers, or when an
operator skips or cancels it, fails when any part of its rule is broken."""

from __future__ import annotations

from typing import Any

import pytest

from rebound_local.invariants import Notice, heads_match
from rebound_local.invariants_orders import recovered_orders_close

pytestmark = pytest.mark.unit

RUN = {"run_id": "billing-1:20260307T002000Z", "state": "succeeded"}
REASON = (
    "run billing-1:20260307T002000Z succeeded on attempt 4 after 3 failed attempts (retry, redrive or replay)"
)
ORDER = {
    "work_order_id": "wo-1",
    "subject": f"run#{RUN['run_id']}",
    "run_id": RUN["run_id"],
    "state": "resolved",
    "resolution": "replayed",
    "resolved_by": "escalation",
    "resolve_reason": REASON,
    "deliveries": [{"channel": "sns", "status": "delivered"}],
    "resolve_deliveries": [{"channel": "sns", "status": "delivered"}],
}
OPENED = {"seq": 1, "action": "opened", "actor": "escalation", "evidence": {}}
RESOLVED = {"seq": 2, "action": "resolved", "actor": "escalation", "evidence": {"reason": REASON}}
NOTICES = [Notice("wo-1", "opened"), Notice("wo-1", "resolved")]


def judge(
    run: dict[str, Any] = RUN,
    order: dict[str, Any] = ORDER,
    records: list[dict[str, Any]] | None = None,
    notices: list[Notice] | None = NOTICES,
    run_chain: list[dict[str, Any]] | None = None,
) -> Any:
    chains = {"workorder#wo-1": [OPENED, RESOLVED] if records is None else records}
    chains[f"run#{run['run_id']}"] = run_chain or []
    return recovered_orders_close([run], [order], chains, notices)


def closed_by(actor: str, action: str, because: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The order of a run ``actor`` closed as ``action``, resolved as it should be, and its record."""
    reason = f"run {RUN['run_id']} {action} by {actor}: {because}"
    order = {**ORDER, "resolution": action, "resolved_by": actor, "resolve_reason": reason}
    return order, {**RESOLVED, "actor": actor, "evidence": {"reason": reason}}


def test_a_recovered_run_whose_order_resolved_itself_once_holds_and_is_counted() -> None:
    held = judge()
    assert held.ok, held.examples
    assert held.counts["checked"] == 1 and held.counts["succeeded"] == 1


def test_an_order_left_open_after_its_run_succeeded_breaks_it() -> None:
    broken = judge(order={**ORDER, "state": "open"}, records=[OPENED])
    assert not broken.ok and "still open" in broken.examples[0]


def test_two_resolved_records_break_it() -> None:
    broken = judge(records=[OPENED, RESOLVED, {**RESOLVED, "seq": 3}])
    assert not broken.ok and "2 resolved audit records" in broken.examples[0]


def test_a_resolution_by_anyone_but_the_system_breaks_it() -> None:
    broken = judge(
        order={**ORDER, "resolved_by": "someone"}, records=[OPENED, {**RESOLVED, "actor": "someone"}]
    )
    assert not broken.ok and "resolved by 'someone'" in broken.examples[0]


def test_a_resolution_without_its_reason_breaks_it() -> None:
    broken = judge(order={**ORDER, "resolve_reason": ""}, records=[OPENED, {**RESOLVED, "evidence": {}}])
    assert not broken.ok and "reason" in broken.examples[0]


def test_a_channel_told_it_opened_but_not_that_it_closed_breaks_it() -> None:
    broken = judge(order={**ORDER, "resolve_deliveries": [{"channel": "sns", "status": "failed"}]})
    assert not broken.ok and "sns told it opened, never that it closed" in broken.examples[0]


def test_a_topic_that_never_received_the_resolved_notice_breaks_it() -> None:
    broken = judge(notices=[Notice("wo-1", "opened")])
    assert not broken.ok and "no resolved notice" in broken.examples[0]
    assert judge(notices=None).ok  # the topic was not read: only the order's own record counts


def test_duplicate_resolved_notices_are_counted_not_failed() -> None:
    held = judge(notices=[*NOTICES, Notice("wo-1", "resolved")])
    assert held.ok and held.counts["duplicate_resolved_notices"] == 1


def test_a_resolved_notice_for_an_order_that_is_not_resolved_breaks_it() -> None:
    dead = {**RUN, "state": "dead_lettered"}
    broken = judge(run=dead, order={**ORDER, "state": "open"}, records=[OPENED])
    assert not broken.ok and "a resolved notice went out, but the order is open" in broken.examples[0]


def test_an_order_resolved_as_replayed_whose_run_did_not_succeed_breaks_it() -> None:
    broken = judge(run={**RUN, "state": "dead_lettered"}, notices=None)
    assert not broken.ok and "resolved as replayed, but run" in broken.examples[0]


def test_an_operators_skip_must_resolve_by_that_operator_with_their_reason() -> None:
    skipped = {**RUN, "state": "skipped"}
    closing = [{"seq": 5, "action": "skipped", "actor": "ops-anna", "evidence": {"reason": "retired"}}]
    order, record = closed_by("ops-anna", "skipped", "retired")
    held = judge(run=skipped, order=order, records=[OPENED, record], run_chain=closing)
    assert held.ok, held.examples
    assert held.counts["skipped"] == 1
    left_open = judge(
        run=skipped, order={**ORDER, "state": "open"}, records=[OPENED], run_chain=closing, notices=None
    )
    assert not left_open.ok and "still open" in left_open.examples[0]
    wrong_reason = {**record, "evidence": {"reason": "no reason"}}
    broken = judge(run=skipped, order=order, records=[OPENED, wrong_reason], run_chain=closing)
    assert not broken.ok and "does not say 'retired'" in broken.examples[0]


def test_a_cancel_by_rebound_itself_must_resolve_the_order_too() -> None:
    """An overlap policy's ``cancel_other`` (the executor) or a workstream's rollback closes a run
    that may still have its order open: the closer resolves it, with the closing record's reason."""
    cancelled = {**RUN, "state": "cancelled"}
    because = "cancelled by job:20260307T090500Z (overlap: cancel_other)"
    by_executor = [{"seq": 7, "action": "cancelled", "actor": "executor", "evidence": {"reason": because}}]
    left_open = judge(
        run=cancelled,
        order={**ORDER, "state": "open", "resolution": None},
        records=[OPENED],
        run_chain=by_executor,
        notices=None,
    )
    assert not left_open.ok and "still open" in left_open.examples[0]
    order, record = closed_by("executor", "cancelled", because)
    held = judge(run=cancelled, order=order, records=[OPENED, record], run_chain=by_executor)
    assert held.ok, held.examples
    assert held.counts["cancelled"] == 1


def test_a_run_chain_without_its_item_fails_heads_match_unless_the_run_finished() -> None:
    """A claim may commit its record alone; its item must follow. A chain whose run is not finished
    and has no item is a run nobody would find: ``heads_match`` says so. A finished run's item may
    have expired (retention) while its chain stays."""
    claim = {"seq": 1, "hash": "h1", "to_state": "running"}
    item = {"run_id": "a:1", "audit_seq": 1, "audit_head": "h1"}
    assert heads_match([item], {"run#a:1": [claim]}).ok
    missing = heads_match([], {"run#a:1": [claim]})
    assert not missing.ok and missing.examples == ["a:1: chain at 1, no item"]
    succeeded = {"seq": 2, "hash": "h2", "to_state": "succeeded"}
    assert heads_match([], {"run#a:1": [claim, succeeded]}).ok
    assert heads_match([], {"reports#a:1": [claim]}).ok  # not a run's own chain
