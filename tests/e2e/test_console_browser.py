"""The console in headless Chromium (the Python ``playwright`` package driving Debian's
``/usr/bin/chromium``; ``make test`` installs it when it can). Each test serves the console
over the moto ``deps`` with dead letters made by the engine, drives a view as an operator would,
and saves a screenshot of it to ``build/screenshots/``. Without the browser or the package, the
tests skip, saying why."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from rebound.engine.deps import Deps
from rebound_cli.console import ConsoleServer
from support import ManualClock, dead_letters

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / "build" / "screenshots"
CHROMIUM = Path(os.environ.get("REBOUND_CHROMIUM", "/usr/bin/chromium"))
OPERATOR = "arn:aws:sts::123456789012:assumed-role/oncall/carol"
WAIT_MS = 10_000


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("the playwright package is not installed (pip install -r requirements/dev.in)")
    if not CHROMIUM.exists():
        pytest.skip(f"no Chromium at {CHROMIUM}: apt-get install -y chromium (make test does it as root)")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Any, deps: Deps, clock: ManualClock) -> Iterator[Any]:
    def moving() -> Deps:
        # Each API request finds the clock a second on, as a real one would be: what the previous
        # request released to the DLQ ("visible again now") is visible to the next.
        clock.advance(1)
        return deps

    with console_open(browser, moving) as opened:
        yield opened


@contextmanager
def console_open(browser: Any, deps: Callable[[], Deps]) -> Iterator[Any]:
    """A console over ``deps`` and a page on it, open on the overview."""
    server = ConsoleServer(deps, OPERATOR, port=0).start()
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        opened = context.new_page()
        opened.set_default_timeout(WAIT_MS)
        opened.goto(server.url)
        opened.wait_for_selector("#queues tbody tr")
        yield opened
    finally:
        context.close()
        server.stop()


def shot(page: Any, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def tab(page: Any, name: str) -> None:
    page.get_by_role("tab", name=name).click()


def test_the_overview_shows_queue_depths_and_recovery_status(page: Any, deps: Deps) -> None:
    dead_letters(deps, 2)
    page.reload()
    expect_text(page, "#queues", "dlq (DLQ)")
    page.wait_for_function(
        "() => [...document.querySelectorAll('#queues tbody tr')]"
        ".some(r => r.cells[0].textContent === 'dlq (DLQ)' && r.cells[4].textContent === '2')"
    )
    expect_text(page, "#run-states", "dead lettered")
    # the DLQ's oldest message, from its record; recovery counts, the retry rate and the charts
    expect_text(page, "#queues", "(dlq record)")
    page.wait_for_function(
        "() => [...document.querySelectorAll('#run-states tbody tr')]"
        ".some(r => r.cells[0].textContent === 'dead lettered' && r.cells[2].textContent === '2')"
    )
    expect_text(page, "#retry-rate", "target")
    assert page.locator("#retry-chart rect").count() == 48  # 24 hours, two outcomes each
    page.wait_for_selector("#dlq-chart polyline", state="attached")
    expect_text(page, "#dlq-chart-text", "DLQ depth now 2")
    assert page.url.endswith("/") and "token" not in page.url  # the token became a cookie
    shot(page, "overview")


def test_dead_letters_appear_in_the_dlq_view(page: Any, deps: Deps) -> None:
    run_ids = dead_letters(deps, 3)
    tab(page, "DLQ")
    for run_id in run_ids:
        expect_text(page, "#dlq-list", run_id)
    expect_text(page, "#dlq-list", "LEDGER_LOCKED")
    page.get_by_role("button", name=f"Details of {run_ids[0]}").click()
    expect_text(page, "#dlq-detail", "Run state")
    shot(page, "dlq")


def test_one_click_replay_of_a_filtered_set_moves_them_and_the_view_updates(page: Any, deps: Deps) -> None:
    run_ids = dead_letters(deps, 3)
    tab(page, "DLQ")
    expect_text(page, "#dlq-list", run_ids[-1])
    page.locator("#dlq-task").fill("job")
    page.get_by_role("button", name="Filter", exact=True).click()
    page.get_by_role("button", name="Replay filtered set…").click()
    dialog = page.locator("#confirm")
    expect_text(page, "#confirm-text", "Dry run: 3 message(s)")
    shot(page, "dlq-replay-confirm")
    dialog.get_by_role("button", name="Confirm").click()
    expect_text(page, "#status", "Replayed: 3 moved")
    # the replay ran as a redrive job: its progress shows until it is done
    expect_text(page, "#dlq-job-text", "succeeded: 3 moved, 0 failed, 0 skipped, 0 remaining of 3")
    assert page.locator("#dlq-job-bar").evaluate("e => e.value") == 1
    expect_text(page, "#dlq-list", "The DLQ holds no matching messages.")
    shot(page, "dlq-replay-job")
    assert deps.queues.counts("dlq").total == 0
    assert {deps.store.get_run(r).state.value for r in run_ids} == {"replayed"}  # type: ignore[union-attr]


def test_the_run_timeline_shows_its_steps(page: Any, deps: Deps) -> None:
    run_id = dead_letters(deps, 1)[0]
    tab(page, "Runs")
    page.get_by_role("button", name="Search").click()
    page.get_by_role("button", name=f"Timeline of {run_id}").click()
    timeline = page.get_by_role("list", name="Timeline")
    for step in ("attempt-failed", "dead-lettered"):
        expect_text(page, "#run-detail", step)
    assert timeline.locator("li").count() >= 2
    page.get_by_role("button", name="Skip").click()  # a reason is required, and said so
    expect_text(page, "#run-reason-error", "A reason is required to skip")
    shot(page, "run-timeline")


def policy_field(page: Any, name: str) -> Any:
    """The ``name`` input of the default policy's form."""
    tab(page, "Policies")
    page.get_by_role("button", name=re.compile(r"^default \(v")).click()
    expect_text(page, "#policy-detail h3", "default: version")
    return page.get_by_label(name, exact=True)


def test_a_policy_change_in_the_form_shows_the_new_version(page: Any, deps: Deps) -> None:
    policy_field(page, "max_attempts").fill("7")
    page.get_by_role("button", name="Show diff and what-if").click()
    expect_text(page, "#policy-result", "max_attempts:")
    # The same figures as `rebound policies whatif`, before saving.
    expect_text(page, "#policy-whatif-table", "Would have dead-lettered")
    expect_text(page, "#policy-whatif", "Added cost over the window")
    page.get_by_role("button", name="Save new version").click()
    expect_text(page, "#policy-result", "as version 1")
    expect_text(page, "#policy-detail h3", "version 1")
    expect_text(page, "#policy-versions", "max_attempts")
    assert deps.policies.effective("default").max_attempts == 7  # what the next retry decision uses
    shot(page, "policies")


def test_a_bad_policy_value_shows_its_field_error(page: Any, deps: Deps) -> None:
    field = policy_field(page, "max_attempts")
    field.fill("0")
    page.get_by_role("button", name="Save new version").click()
    expect_text(page, "#pf-max_attempts-error", "max_attempts")
    assert field.get_attribute("aria-invalid") == "true"
    expect_text(page, "#policy-result", "Not saved")
    assert deps.policies.effective("default").max_attempts != 0
    shot(page, "policy-field-error")


def test_work_orders_and_retry_health(page: Any, deps: Deps) -> None:
    from rebound.domain.basics import Severity
    from rebound.ops.workorders import WorkOrderOps

    order = WorkOrderOps(deps, OPERATOR).create(severity=Severity.HIGH, reason="disk full")
    tab(page, "Work orders")
    expect_text(page, "#wo-list", order.work_order_id)
    page.get_by_role("button", name="Acknowledge").click()
    expect_text(page, "#status", "ack done")
    page.locator("#wo-state").select_option("acknowledged")
    page.get_by_role("button", name="Show").click()
    expect_text(page, "#wo-list", "acknowledged")
    shot(page, "workorders")
    tab(page, "Retry health")
    expect_text(page, "#health-checks", "retry_worker")
    expect_text(page, "#health-summary", "Overall:")
    shot(page, "health")


def test_runs_by_state_come_a_page_at_a_time(page: Any, deps: Deps) -> None:
    run_ids = dead_letters(deps, 52)
    tab(page, "Runs")
    page.get_by_role("button", name="Search").click()  # dead_lettered, no task: by state
    expect_text(page, "#runs-page", "Page 1: 50 run(s), more on the next page")
    first = set(page.locator("#runs-list tbody tr td:first-child").all_text_contents())
    page.get_by_role("button", name="Next page").click()
    expect_text(page, "#runs-page", "Page 2: 2 run(s).")
    second = set(page.locator("#runs-list tbody tr td:first-child").all_text_contents())
    assert first | second == set(run_ids) and not first & second
    assert page.get_by_role("button", name="Next page").is_disabled()
    shot(page, "runs")


def test_the_delivery_retry_plan_with_its_fields(page: Any, deps: Deps) -> None:
    tab(page, "Delivery retries")
    expect_text(page, "#deliveries-summary", "0 to retry, 0 to wait, 0 suppressed")
    expect_text(page, "#deliveries-list", "No failed deliveries.")
    page.get_by_label("Backoff multiplier").fill("0.5")
    page.get_by_role("button", name="Plan").click()
    expect_text(page, "#deliveries-error", "backoff_multiplier")
    page.get_by_label("Backoff multiplier").fill("3")
    page.get_by_role("button", name="Plan").click()
    expect_text(page, "#deliveries-summary", "Plan at")
    shot(page, "deliveries")


def test_a_flag_is_turned_off_from_the_console_with_a_reason_and_audited(page: Any, deps: Deps) -> None:
    from rebound.ops.flags import flags_subject

    tab(page, "Flags")
    expect_text(page, "#flags-list", "failed attempts are retried")
    page.get_by_label("Reason (for the audit trail)").fill("incident 4711")
    page.get_by_role("button", name="Turn task-retry-queue off").click()
    expect_text(page, "#confirm-text", "Handlers read the change within 30 s")
    page.locator("#confirm").get_by_role("button", name="Confirm").click()
    expect_text(page, "#status", "task-retry-queue is now off")
    page.get_by_role("button", name="Turn task-retry-queue on").wait_for()  # the row shows it off
    shot(page, "flags")
    [record] = deps.store.audit_trail(flags_subject(deps.settings.environment))
    assert (record.actor, record.to_state, record.evidence["reason"]) == (OPERATOR, "off", "incident 4711")


def test_a_request_for_a_second_operator_is_approved_from_the_console_and_carried_out(
    page: Any, deps: Deps
) -> None:
    from rebound.domain.approvals import SKIP, ApprovalRequired
    from rebound.ops.approvals import Approvals

    [run_id] = dead_letters(deps, 1)
    asked = {"run_id": run_id, "reason": "paid by hand"}
    with pytest.raises(ApprovalRequired) as held:
        Approvals(deps, "arn:aws:iam::123456789012:user/alice").gate(
            SKIP, "acme", f"run#{run_id}", asked, "paid by hand"
        )
    request_id = held.value.request.request_id
    tab(page, "Approvals")
    expect_text(page, "#approvals-list", request_id)
    page.get_by_label("Note (for the audit trail)").fill("checked with finance")
    shot(page, "approvals")
    page.get_by_role("button", name="Approve").click()
    expect_text(page, "#confirm-text", "carried out at once, as you")
    page.locator("#confirm").get_by_role("button", name="Confirm").click()
    expect_text(page, "#status", f"{request_id} approved: carried out")
    expect_text(page, "#approvals-list", "No request waits for a second operator.")
    run = deps.store.get_run(run_id)
    assert run is not None and run.state.value == "skipped"
    [skipped] = [r for r in deps.store.audit_trail(f"run#{run_id}") if r.action == "skipped"]
    assert (skipped.actor, skipped.evidence["approval"]) == (OPERATOR, request_id)


def test_the_tabs_are_keyboard_navigable(page: Any) -> None:
    page.get_by_role("tab", name="Overview").focus()
    page.keyboard.press("ArrowRight")
    assert page.get_by_role("tab", name="Tasks").get_attribute("aria-selected") == "true"
    assert page.evaluate("document.activeElement.id") == "tab-tasks"
    page.keyboard.press("End")
    assert page.locator("#view-deliveries").is_visible()


def expect_text(page: Any, selector: str, text: str) -> None:
    """Wait until ``selector`` contains ``text`` (the console refreshes by itself)."""
    try:
        page.wait_for_function(
            "([s, t]) => { const e = document.querySelector(s); return !!e && e.textContent.includes(t); }",
            arg=[selector, text],
        )
    except Exception as exc:
        found = page.locator(selector).first.text_content() if page.locator(selector).count() else None
        status = page.locator("#status").text_content()
        shows = f"it shows {found!r} (status {status!r})"
        raise AssertionError(f"{selector} never showed {text!r}; {shows}") from exc
