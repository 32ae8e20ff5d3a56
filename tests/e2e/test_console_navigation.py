"""The console as an operator navigates it, in headless Chromium: a Tasks view that pauses,
resumes and runs a task; the view and the open run in the URL (back and forward work, a run has
a page of its own, a run id can be searched); runs in any state; a run's timeline with its retry
budget and its evidence as labelled fields; a replay dialog in words; and every view on a 420 px
screen with no sideways scrolling. Screenshots go to ``build/screenshots/`` (``docs/console/``
keeps copies)."""

# ruff: noqa: F811  (the fixtures imported from test_console_browser are the tests' arguments)
from __future__ import annotations

from typing import Any

import pytest
from test_console_browser import browser, console_open, expect_text, page, shot, tab  # noqa: F401

from rebound.domain.task import TaskState
from rebound.engine.deps import Deps
from support import ManualClock, dead_letters, register, task

pytestmark = pytest.mark.e2e

VIEWS = ("Overview", "Tasks", "DLQ", "Runs", "Work orders", "Workstreams", "Policies", "Retry health")


def hash_of(page: Any) -> str:
    return str(page.evaluate("() => decodeURIComponent(location.hash)"))


def test_the_tasks_view_pauses_resumes_and_runs_a_task_and_shows_its_fires(page: Any, deps: Deps) -> None:
    register(deps, task("acme.nightly", schedule={"cron": "0 2 * * *"}))
    tab(page, "Tasks")
    expect_text(page, "#tasks-list", "acme.nightly")
    expect_text(page, "#tasks-list", "cron 0 2 * * * (UTC)")
    page.get_by_role("button", name="Pause acme.nightly").click()
    page.locator("#confirm").get_by_role("button", name="Confirm").click()
    expect_text(page, "#status", "Task acme.nightly: paused")
    assert deps.store.get_task("acme.nightly").task.state is TaskState.PAUSED  # type: ignore[union-attr]
    page.get_by_role("button", name="Resume acme.nightly").click()
    page.locator("#confirm").get_by_role("button", name="Confirm").click()
    expect_text(page, "#status", "Task acme.nightly: active")
    page.get_by_role("button", name="Run acme.nightly now").click()
    expect_text(page, "#status", "queued")
    assert deps.queues.counts("execution").total == 1, "the manual run is on the execution queue"
    page.get_by_role("button", name="Details of acme.nightly").click()
    expect_text(page, "#task-detail", "Next fires")
    assert hash_of(page) == "#task/acme.nightly"
    assert page.get_by_role("list", name="Next fires").locator("li").count() == 5
    expect_text(page, "#task-detail", "Last run")
    shot(page, "tasks")


def test_the_url_follows_the_view_and_the_run_with_back_and_forward(page: Any, deps: Deps) -> None:
    [run_id] = dead_letters(deps, 1)
    tab(page, "DLQ")
    assert hash_of(page) == "#dlq"
    page.locator("#goto-run-id").fill(run_id)
    page.get_by_role("button", name="Open run").click()
    expect_text(page, "#run-detail", "dead-lettered")
    assert hash_of(page) == f"#run/{run_id}"
    assert page.get_by_role("tab", name="Runs").get_attribute("aria-selected") == "true"
    page.go_back()
    page.wait_for_function("() => location.hash === '#dlq'")
    assert page.get_by_role("tab", name="DLQ").get_attribute("aria-selected") == "true"
    page.go_forward()
    expect_text(page, "#run-detail", "dead-lettered")
    assert page.locator("#run-detail").is_visible()


def test_a_run_has_a_page_of_its_own(browser: Any, deps: Deps, clock: ManualClock) -> None:
    [run_id] = dead_letters(deps, 1)
    with console_open(browser, lambda: deps) as opened:
        opened.goto(opened.url.split("#")[0] + "#run/" + run_id)
        expect_text(opened, "#run-detail", f"Run {run_id}")
        assert opened.get_by_role("tab", name="Runs").get_attribute("aria-selected") == "true"


def test_runs_in_any_state_and_a_timeline_with_its_budget_and_evidence(page: Any, deps: Deps) -> None:
    run_ids = dead_letters(deps, 2)
    register(deps, task("acme.ok", target={"type": "sim"}))
    tab(page, "Runs")
    page.locator("#runs-state").select_option("")
    page.get_by_role("button", name="Search").click()
    expect_text(page, "#runs-page", "in any state")
    for run_id in run_ids:
        expect_text(page, "#runs-list", run_id)
    page.get_by_role("button", name=f"Timeline of {run_ids[0]}").click()
    expect_text(page, "#run-detail", "in the current retry budget")
    assert "undefined" not in page.locator("#run-detail").inner_text()
    evidence = page.locator("#run-detail dl.fields")
    assert evidence.count() >= 1 and evidence.first.locator("dt").count() >= 1
    assert "{" not in evidence.first.locator("dt").first.inner_text()
    shot(page, "run-page")


def test_the_replay_dialog_says_what_would_happen_in_words(page: Any, deps: Deps) -> None:
    dead_letters(deps, 2)
    tab(page, "DLQ")
    page.get_by_role("button", name="Replay filtered set…").click()
    expect_text(page, "#confirm-text", "2 would move")
    assert "{" not in page.locator("#confirm-text").inner_text()
    page.locator("#confirm").get_by_role("button", name="Cancel").click()


def test_every_view_fits_a_420_px_screen(page: Any, deps: Deps) -> None:
    dead_letters(deps, 2)
    page.set_viewport_size({"width": 420, "height": 900})
    for name in VIEWS:
        tab(page, name)
        page.wait_for_timeout(300)
        width = page.evaluate("() => document.documentElement.scrollWidth")
        assert width <= 420, f"{name}: the page is {width} px wide on a 420 px screen"
    tab(page, "DLQ")
    expect_text(page, "#dlq-list", "LEDGER_LOCKED")
    shot(page, "narrow-dlq")
