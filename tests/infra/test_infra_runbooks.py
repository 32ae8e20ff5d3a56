"""Every alarm has a runbook page in docs/runbooks, its description links to it, and the runbook
index lists it.

The alarms are read from one environment's stack as the app builds it (no synthesis, no
cdk-nag: the alarm set is the same in every environment), so this is cheap to run on its own.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.infra
RUNBOOKS = Path(__file__).resolve().parents[2] / "docs" / "runbooks"
# Pages that work orders link to rather than an alarm.
# Pages reached from a work order rather than an alarm: dead letters, and asynchronous attempts
# that timed out (their runs dead-letter or breach the SLA; no alarm of their own).
WORK_ORDER_PAGES = {
    "dead-lettered-run.md",
    "critical-task-dead-lettered.md",
    "heartbeat-timeouts.md",
    "target-unhealthy.md",  # the work order of a target whose retry budget tripped
    "work-order-by-hand.md",  # an order an operator opened about a task or the environment
}
PROCEDURE_PAGES = {"restore.md"}  # an operator's procedure, not an alarm's or a work order's page
# The page of alarms only an environment with provisioned capacity has (``test_infra_capacity.py``
# checks those alarms link it).
PROVISIONED_PAGES = {"dynamodb-throttling.md"}


@pytest.fixture(scope="module")
def observability() -> Iterator[Any]:
    os.environ.setdefault("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "1")
    os.environ.setdefault("JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION", "1")
    from rebound_infra.app import build_app

    _, stacks = build_app(["prod"], nag=False)
    yield stacks["prod"].observability


def description(alarm: Any) -> str:
    return str(alarm.node.default_child.alarm_description)


def test_every_alarm_has_a_runbook_page_that_exists(observability: Any) -> None:
    alarms, runbooks = observability.alarms, observability.runbooks
    assert set(runbooks) == set(alarms)
    missing = {alarm: page for alarm, page in runbooks.items() if not (RUNBOOKS / page).is_file()}
    assert not missing, f"alarms whose runbook page does not exist: {missing}"


def test_each_alarm_description_links_its_runbook(observability: Any) -> None:
    for name, alarm in observability.alarms.items():
        link = re.search(r"Runbook: (\S+)$", description(alarm))
        assert link, (name, description(alarm))
        assert link.group(1) == f"docs/runbooks/{observability.runbooks[name]}"
        assert (RUNBOOKS.parents[1] / link.group(1)).is_file(), link.group(1)
        assert len(description(alarm)) <= 1024


@pytest.mark.parametrize(
    ("alarm", "page"),
    [
        ("ExecutionBacklog", "execution-backlog.md"),
        ("OutboxLag", "outbox-lag.md"),
        ("ExecutorErrors", "executor-errors.md"),
        ("RetrySchedulerErrors", "retry-scheduler-errors.md"),
        ("EscalationErrors", "escalation-errors.md"),
        ("OutboxRelayErrors", "outbox-relay-errors.md"),
        ("SweeperErrors", "sweeper-errors.md"),
        ("OpsApiErrors", "ops-api-errors.md"),
        ("DlqOldestAge", "dlq-depth-and-age.md"),
        ("SchedulerDlqDepth", "dlq-depth-and-age.md"),
    ],
)
def test_the_alarms_map_to_their_pages(observability: Any, alarm: str, page: str) -> None:
    assert observability.runbooks[alarm] == page
    assert f"`{alarm}`" in (RUNBOOKS / page).read_text(encoding="utf-8"), f"{page} does not name {alarm}"


def test_the_runbook_index_lists_every_alarm_and_every_page(observability: Any) -> None:
    index = (RUNBOOKS / "README.md").read_text(encoding="utf-8")
    rows = [line for line in index.splitlines() if line.startswith("| `")]
    for name, page in observability.runbooks.items():
        if name.endswith(("Depth", "OldestAge")):
            continue  # one row names the DLQ alarms of all three queues
        assert any(f"`{name}`" in row and f"]({page})" in row for row in rows), name
    pages = {p.name for p in RUNBOOKS.glob("*.md")} - {"README.md"}
    expected = set(observability.runbooks.values()) | WORK_ORDER_PAGES | PROCEDURE_PAGES | PROVISIONED_PAGES
    assert pages == expected
    for page in pages:
        assert f"]({page})" in index, f"README.md does not link {page}"


def test_an_alarm_without_a_runbook_is_refused(observability: Any) -> None:
    from aws_cdk import aws_cloudwatch as cw

    metric = cw.Metric(namespace="Rebound", metric_name="anything")
    with pytest.raises(ValueError, match="alarm NoPage has no runbook"):
        observability.alarm("NoPage", metric, threshold=1, description="nothing")
