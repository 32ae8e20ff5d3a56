"""The console's workstream graph view and the DLQ chart's history, in headless Chromium (the
fixtures, the screenshots and the skips of ``test_console_browser``).

The workstream test plays the demo's story on the local cloud (``config/demo/workstream.yaml``:
extract → transform → load, transform failing until fixed) with the console served over it: an
operator starts the run from the console, watches transform dead-letter and load get blocked in
the graph (each step's state in words), rolls back to a checkpoint and resumes from the console,
and watches it complete; then retries the whole workstream, removes a dependency in the new run,
and cancels and skips steps, a reason required for each."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from test_console_browser import OPERATOR, browser, console_open, expect_text, shot, tab  # noqa: F401
from test_console_browser import page as moto_page  # noqa: F401  (the console over the moto deps)

from rebound.domain.target_specs import SimBehavior, SimTarget
from rebound.domain.tenancy import short_id
from rebound.engine.deps import Deps
from rebound.engine.workstreams import workstream_subject
from rebound.ops.dlq import DlqFilter, DlqOps
from rebound.ops.tasks import TaskOps
from rebound.ops.workstreams import WorkstreamOps
from rebound_local.clock import VirtualClock
from rebound_local.cloud import reset_moto
from rebound_local.demo_workstream import DEMO_WORKSTREAM
from rebound_local.stack import LocalStack, start_local
from support import ManualClock, dead_letters

pytestmark = pytest.mark.e2e
START = datetime(2026, 3, 7, 8, 59, tzinfo=UTC)


@pytest.fixture
def demo_stack() -> Iterator[LocalStack]:
    """The local cloud with the demo's workstream and its tasks registered (not run yet)."""
    reset_moto()
    stack = start_local(VirtualClock(START), transport="direct")
    try:
        tasks = TaskOps(stack.deps, actor="demo")
        tasks.apply(tasks.plan(tasks.load_document(DEMO_WORKSTREAM).tasks))
        WorkstreamOps(stack.deps, actor="demo").apply(DEMO_WORKSTREAM)
        yield stack
    finally:
        stack.stop()
        reset_moto()


@pytest.fixture
def console_page(browser: Any, demo_stack: LocalStack) -> Iterator[Any]:  # noqa: F811
    with console_open(browser, lambda: demo_stack.deps) as opened:
        yield opened


def run_for(stack: LocalStack, delta: timedelta) -> None:
    stack.runtime.run_virtual(stack.deps.clock.now() + delta)


def step_state(page: Any, step: str) -> str:
    """The state the graph says in words for ``step`` (its box's second line)."""
    return str(page.locator(f'#ws-graph g[data-step="{step}"] text.state').text_content())


def confirm(page: Any, says: str) -> None:
    expect_text(page, "#confirm-text", says)
    page.locator("#confirm").get_by_role("button", name="Confirm").click()


def fix_transform(deps: Deps) -> None:
    tasks = TaskOps(deps, actor="demo")
    transform = next(
        t for t in tasks.load_document(DEMO_WORKSTREAM).tasks if short_id(t.id) == "ledger-transform"
    )
    fixed = transform.model_copy(update={"target": SimTarget(type="sim", behavior=SimBehavior(ok=True))})
    tasks.apply(tasks.plan([fixed]))


def test_the_graph_view_shows_a_failed_step_then_rollback_and_resume_complete_it(
    console_page: Any, demo_stack: LocalStack
) -> None:
    page = console_page
    tab(page, "Workstreams")
    expect_text(page, "#ws-list", "nightly-ledger")
    expect_text(page, "#ws-list", "never run")
    page.get_by_role("button", name="Start a run of nightly-ledger").click()
    confirm(page, "Its root steps start now")
    expect_text(page, "#status", "Started run")
    expect_text(page, "#ws-run-title", ": running")
    assert "running" in step_state(page, "ledger-extract")

    run_for(demo_stack, timedelta(hours=2))  # transform fails 3 times and dead-letters
    expect_text(page, "#ws-run-title", ": failed")
    assert step_state(page, "ledger-extract") == "✔ succeeded"
    assert step_state(page, "ledger-transform") == "✖ failed"
    assert step_state(page, "ledger-load") == "■ blocked"
    steps = page.locator("#ws-steps")
    assert "✖ failed" in str(steps.locator('tr[data-step="ledger-transform"]').text_content())
    assert page.locator("#ws-graph path.edge").count() == 2
    expect_text(page, "#ws-graph-text", "ledger-load is blocked (needs ledger-transform)")
    shot(page, "workstream-failed")

    fix_transform(demo_stack.deps)
    page.locator("#ws-rollback-to").select_option("1")
    page.get_by_role("button", name="Roll back…").click()
    confirm(page, "goes back to checkpoint 1")
    expect_text(page, "#status", "Rolled back: the run is rolled_back")
    expect_text(page, "#status", "not rolled back: ledger-extract")
    page.get_by_role("button", name="Resume…", exact=True).click()
    confirm(page, "carries on from where it stopped")
    expect_text(page, "#status", "started ledger-transform")

    run_for(demo_stack, timedelta(minutes=30))
    expect_text(page, "#ws-run-title", ": completed")
    for step in ("ledger-extract", "ledger-transform", "ledger-load"):
        assert step_state(page, step) == "✔ succeeded"
    expect_text(page, "#ws-runs", "completed")
    shot(page, "workstream-graph")
    run_id = WorkstreamOps(demo_stack.deps, "reader").show("nightly-ledger").run_id
    trail = demo_stack.deps.store.audit_trail(workstream_subject(run_id))
    assert [r.action for r in trail if r.actor == OPERATOR] == ["started", "rolled-back", "resumed"]


def test_retry_remove_a_dependency_and_skip_and_cancel_with_a_required_reason(
    console_page: Any, demo_stack: LocalStack
) -> None:
    page = console_page
    first = WorkstreamOps(demo_stack.deps, "demo").run("nightly-ledger", token="first").run_id
    tab(page, "Workstreams")
    expect_text(page, "#ws-run-title", first)
    page.get_by_role("button", name="Retry whole workstream…").click()
    confirm(page, "A new run of the workstream starts")
    expect_text(page, "#status", "the whole workstream again")
    second = WorkstreamOps(demo_stack.deps, "reader").show("nightly-ledger").run_id
    assert second != first
    expect_text(page, "#ws-run-title", second)

    page.get_by_role("button", name="Remove ledger-transform's need of ledger-extract").click()
    confirm(page, "no longer waits for ledger-extract")
    expect_text(page, 'tr[data-step="ledger-transform"]', "(removed: ledger-extract)")
    assert "running" in step_state(page, "ledger-transform")  # it needs nothing now
    assert page.locator("#ws-graph path.edge.removed").count() == 1

    page.get_by_role("button", name="Cancel ledger-extract").click()  # no reason given
    expect_text(page, "#ws-reason-error", "A reason is required to cancel step ledger-extract")
    assert page.locator("#ws-reason").get_attribute("aria-invalid") == "true"
    page.get_by_label("Reason (required to skip or cancel a step)").fill("source system is down")
    page.get_by_role("button", name="Cancel ledger-extract").click()
    confirm(page, 'Reason: "source system is down"')
    expect_text(page, "#status", "Step ledger-extract cancelled")
    expect_text(page, 'tr[data-step="ledger-extract"]', "⊘ cancelled")

    page.get_by_label("Reason (required to skip or cancel a step)").fill("loaded by hand")
    page.get_by_role("button", name="Skip ledger-load").click()
    confirm(page, "marked completed, with a warning")
    expect_text(page, 'tr[data-step="ledger-load"]', "↷ skipped")
    assert step_state(page, "ledger-load") == "↷ skipped"
    shot(page, "workstream-actions")
    trail = demo_stack.deps.store.audit_trail(workstream_subject(second))
    mine = [(r.action, r.evidence.get("reason")) for r in trail if r.actor == OPERATOR]
    assert ("step-cancelled", "source system is down") in mine and ("step-skipped", "loaded by hand") in mine
    assert "dependency-removed" in [action for action, _ in mine]


def test_the_dlq_chart_shows_the_history_from_before_the_page_opened(
    moto_page: Any,  # noqa: F811  (the fixture imported above)
    deps: Deps,
    clock: ManualClock,
) -> None:
    page = moto_page
    dead_letters(deps, 3)
    clock.advance(600)
    DlqOps(deps, OPERATOR, wait_s=0).redrive(DlqFilter(task_id="job"), limit=1)
    clock.advance(300)
    page.reload()  # a fresh page: what it shows of the last hour comes from the DLQ's record
    expect_text(page, "#dlq-chart-text", "DLQ depth now 2. Over the last hour: 0 at the start, highest 3")
    expect_text(page, "#dlq-chart-text", "3 arrived, 1 left")
    assert page.get_by_role("button", name="Last hour").get_attribute("aria-pressed") == "true"
    page.get_by_role("button", name="Last 24 hours").click()
    expect_text(page, "#dlq-chart-text", "Over the last 24 hours")
    expect_text(page, "#dlq-chart-text", "15 min per point")
    assert page.get_by_role("button", name="Last 24 hours").get_attribute("aria-pressed") == "true"
    assert page.locator("#dlq-chart polyline").count() == 1
    shot(page, "overview-dlq-history")
