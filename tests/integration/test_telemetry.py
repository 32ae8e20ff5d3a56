"""Telemetry: the metric names the architecture promises exist, the retry metrics count one run's
way from failure to escalation, and the executor's per-attempt log line carries the promised fields."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from rebound.domain.run import RunState
from rebound.domain.timefmt import iso
from rebound.engine import telemetry
from rebound.engine.deps import Deps
from rebound.handlers import escalation, executor, retry_scheduler
from rebound_local.instrument import RecordingMetrics
from support import REPO, Context, bus_event, fire, outbox_events, queue_messages, register, sqs_event, task

pytestmark = pytest.mark.integration
RUN_ID = "job:20260307T090000Z"
ARCHITECTURE = REPO / "docs" / "architecture" / "telemetry.md"
RETRY_METRICS = (
    telemetry.RETRY_SCHEDULED,
    telemetry.RETRY_SUCCESS,
    telemetry.RETRY_FAILURE,
    telemetry.RETRY_DLQ,
    telemetry.RETRY_ESCALATED,
)


# --------------------------------------------------------------------------- the documented names


def telemetry_section(path: Path = ARCHITECTURE) -> list[str]:
    assert path.is_file(), f"{path} is missing: it defines the telemetry names"
    lines = path.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(r"^#+\s+Telemetry\b", line))
    level = len(lines[start]) - len(lines[start].lstrip("#"))
    section: list[str] = []
    for line in lines[start + 1 :]:
        heading = re.match(r"^(#+)\s", line)
        if heading and len(heading.group(1)) <= level:
            break
        section.append(line)
    return section


def documented(kind: str) -> list[str]:
    """The backticked names on the Telemetry bullets whose label mentions ``kind``."""
    names: list[str] = []
    bullets: list[str] = []
    for line in telemetry_section():
        if line.startswith(("- ", "* ")):
            bullets.append(line)
        elif line.startswith("  ") and bullets and line.strip():
            bullets[-1] += " " + line.strip()  # a bullet wrapped onto the next line
    for line in bullets:  # prose around the bullets names other things (dimensions, services)
        label, sep, rest = line.strip().lstrip("-* ").partition(":")
        if sep and kind in label.lower():
            names += re.findall(r"`([^`]+)`", rest)
    return names


def test_the_telemetry_section_is_parsed() -> None:
    metrics, fields = documented("metric"), documented("log field")
    assert len(metrics) >= 10 and all(n.startswith(("task.", "workorder.")) for n in metrics), metrics
    assert "task_id" in fields and "error_code" in fields, fields


def test_every_documented_metric_name_is_a_telemetry_constant() -> None:
    constants = {
        value for name, value in vars(telemetry).items() if name.isupper() and isinstance(value, str)
    }
    missing = [name for name in documented("metric") if name not in constants]
    assert missing == [], (
        f"metric names in docs/architecture/telemetry.md with no constant in telemetry.py: {missing}"
    )


# --------------------------------------------------------------------------- one run's retry metrics


def retry_counts(metrics: RecordingMetrics) -> dict[str, float]:
    return {name: metrics.counts.get(name, 0.0) for name in RETRY_METRICS}


def expect(**counts: float) -> dict[str, float]:
    names = dict(zip(("scheduled", "success", "failure", "dlq", "escalated"), RETRY_METRICS, strict=True))
    return {names[k]: float(counts.get(k, 0)) for k in names}


def run_message(body: dict[str, Any] | str) -> None:
    assert executor.lambda_handler(sqs_event(body), Context()) == {"batchItemFailures": []}


def decide(deps: Deps) -> None:
    detail = [d for t, d in outbox_events(deps) if t == "task.execution.failed"][-1]
    retry_scheduler.lambda_handler(sqs_event(bus_event("task.execution.failed", detail)), Context())


def next_attempt(deps: Deps, delay_s: float) -> None:
    """Let the planned retry come due and deliver its message to the executor."""
    deps.clock.sleep(delay_s)  # type: ignore[attr-defined]
    [msg] = queue_messages(deps, "execution")
    deps.queues.client.purge_queue(QueueUrl=deps.settings.queue("execution").url)
    run_message(msg["raw"])


def test_one_run_from_failure_to_escalation_counts_each_retry_metric(
    wired: Deps, metrics: RecordingMetrics
) -> None:
    register(wired, task("job", target={"type": "sim", "behavior": {"always_fail": True}}))
    assert wired.policies.for_task(None).max_attempts == 3

    run_message(fire("job"))  # attempt 1 fails: not a retry
    assert retry_counts(metrics) == expect()
    decide(wired)
    assert retry_counts(metrics) == expect(scheduled=1)

    next_attempt(wired, 120)  # attempt 2 fails: a retry that failed
    assert retry_counts(metrics) == expect(scheduled=1, failure=1)
    decide(wired)
    assert retry_counts(metrics) == expect(scheduled=2, failure=1)

    next_attempt(wired, 240)  # attempt 3 fails: the budget is spent
    assert retry_counts(metrics) == expect(scheduled=2, failure=2)
    decide(wired)
    run = wired.store.get_run(RUN_ID)
    assert run is not None and run.state is RunState.DEAD_LETTERED
    assert retry_counts(metrics) == expect(scheduled=2, failure=2, dlq=1)

    [dead] = [d for t, d in outbox_events(wired) if t == "task.dead_lettered"]
    escalation.lambda_handler(sqs_event(bus_event("task.dead_lettered", dead)), Context())
    assert len(wired.store.work_orders()) == 1
    assert retry_counts(metrics) == expect(scheduled=2, failure=2, dlq=1, escalated=1)

    # Redelivered events change no count.
    escalation.lambda_handler(sqs_event(bus_event("task.dead_lettered", dead)), Context())
    decide(wired)
    assert retry_counts(metrics) == expect(scheduled=2, failure=2, dlq=1, escalated=1)
    assert metrics.counts[telemetry.EXECUTION_FAILURE] == 3
    assert metrics.counts[telemetry.EXECUTION_RETRY] == 2
    assert metrics.counts.get(telemetry.EXECUTION_SUCCESS, 0) == 0
    assert metrics.counts[telemetry.WORKORDER_OPENED] == 1


def test_a_retry_that_succeeds_counts_a_retry_success(wired: Deps, metrics: RecordingMetrics) -> None:
    register(wired, task("job", target={"type": "sim", "behavior": {"fail_first": 1}}))
    run_message(fire("job"))
    decide(wired)
    next_attempt(wired, 120)
    run = wired.store.get_run(RUN_ID)
    assert run is not None and run.state is RunState.SUCCEEDED and run.attempt == 2
    assert retry_counts(metrics) == expect(scheduled=1, success=1)
    assert metrics.counts[telemetry.EXECUTION_SUCCESS] == 1
    assert metrics.counts[telemetry.EXECUTION_FAILURE] == 1


def test_a_first_attempt_success_is_not_a_retry_success(wired: Deps, metrics: RecordingMetrics) -> None:
    register(wired, task("job"))
    run_message(fire("job"))
    assert retry_counts(metrics) == expect()
    assert metrics.counts[telemetry.EXECUTION_SUCCESS] == 1


# --------------------------------------------------------------------------- the attempt log line


class Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def executor_log() -> Iterator[Capture]:
    """Records of the executor's logger, caught on the logger itself (it need not propagate)."""
    logger = logging.getLogger("rebound.engine.executor")
    capture = Capture()
    level = logger.level
    logger.addHandler(capture)
    logger.setLevel(logging.INFO)
    yield capture
    logger.removeHandler(capture)
    logger.setLevel(level)


def as_json_lines(records: list[logging.LogRecord]) -> list[dict[str, Any]]:
    """The lines as the handlers' Powertools formatter writes them."""
    from aws_lambda_powertools.logging.formatter import LambdaPowertoolsFormatter

    logger = logging.getLogger("rebound.engine.executor")
    formatter = next(
        (h.formatter for h in logger.handlers if isinstance(h.formatter, LambdaPowertoolsFormatter)),
        LambdaPowertoolsFormatter(),
    )
    return [json.loads(formatter.format(r)) for r in records]


def attempt_records(capture: Capture) -> list[logging.LogRecord]:
    return [r for r in capture.records if r.getMessage() == "attempt finished"]


def test_the_attempt_finished_line_carries_every_documented_log_field(
    wired: Deps, executor_log: Capture
) -> None:
    fields = documented("log field")
    register(wired, task("job", target={"type": "sim", "behavior": {"fail_first": 1, "duration_s": 2}}))
    started = wired.clock.now()
    run_message(fire("job"))
    decide(wired)
    next_attempt(wired, 120)

    records = attempt_records(executor_log)
    assert len(records) == 2
    for record in records:
        missing = [f for f in fields if f not in record.__dict__]
        assert missing == [], f"log fields missing from the attempt record: {missing}"
    first, second = as_json_lines(records)
    # The failed attempt's line has every field; Powertools leaves out keys whose value is None,
    # which on a success is error_code alone.
    assert [f for f in fields if f not in first] == []
    assert [f for f in fields if f not in second] in ([], ["error_code"])

    run = wired.store.get_run(RUN_ID)
    assert run is not None and run.state is RunState.SUCCEEDED
    assert first["task_id"] == second["task_id"] == "job"
    assert first["tenant_id"] == second["tenant_id"] == "acme"
    assert first["trigger_time"] == second["trigger_time"] == "2026-03-07T09:00:00.000Z"
    assert first["actual_start"] == iso(started)
    assert second["actual_start"] == iso(run.attempts[1].started_at)
    assert second["actual_start"] == iso(started + timedelta(seconds=2 + 120))
    assert first["duration_ms"] == second["duration_ms"] == 2000
    assert (first["status"], second["status"]) == ("failed", "succeeded")
    assert (first["retry_count"], second["retry_count"]) == (0, 1)
    assert first["error_code"] == "SIM_FAILURE" and second.get("error_code") is None
    assert first["run_id"] == second["run_id"] == RUN_ID
