"""Helpers shared by the handler and engine tests: real-shaped Lambda inputs, queue reads."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from rebound.domain.events import execution_updated
from rebound.domain.run import Attempt, AttemptOutcome, Run, RunState, Trigger
from rebound.domain.task import Task
from rebound.engine.deps import Deps
from rebound.ops.tasks import TaskOps

START = datetime(2026, 3, 7, 9, 0, tzinfo=UTC)


@dataclass
class _ManualTimer:
    when: datetime
    fn: Callable[[], object]
    cancelled: bool = False

    def cancel(self) -> None:
        self.cancelled = True


class ManualClock:
    """Time stands still until a test moves it; ``sleep`` moves it."""

    def __init__(self, start: datetime = START) -> None:
        self._now = start
        self._timers: list[_ManualTimer] = []

    def now(self) -> datetime:
        return self._now

    def sleep(self, seconds: float) -> None:
        self.advance(seconds)

    def advance(self, seconds: float) -> datetime:
        self._now += timedelta(seconds=seconds)
        due = [t for t in self._timers if t.when <= self._now]
        self._timers = [t for t in self._timers if t.when > self._now]
        for timer in sorted(due, key=lambda t: t.when):
            if not timer.cancelled:
                timer.fn()  # in the thread that moved time on, as it passes
        return self._now

    def call_at(self, when: datetime, fn: Callable[[], object]) -> _ManualTimer:
        timer = _ManualTimer(when, fn)
        self._timers.append(timer)
        return timer

    def set(self, when: datetime) -> None:
        self._now = when


def task(task_id: str, **overrides: Any) -> Task:
    data: dict[str, Any] = {
        "id": task_id,
        "tenant": "acme",
        "schedule": {"cron": "*/5 * * * *"},
        "target": {"type": "sim", "behavior": {"ok": True}},
        "timeout_s": 30,
    }
    data.update(overrides)
    return Task.model_validate(data)


def register(deps: Deps, *tasks: Task) -> None:
    ops = TaskOps(deps, actor="test")
    ops.apply(ops.plan(tasks))


def count_task_scans(store: Any, monkeypatch: Any) -> list[int]:
    """Spy on ``store.list_tasks`` (a scan of the tasks table): how many tasks each call returned."""
    seen: list[int] = []
    list_tasks = store.list_tasks

    def counted() -> Any:
        tasks = list_tasks()
        seen.append(len(tasks))
        return tasks

    monkeypatch.setattr(store, "list_tasks", counted)
    return seen


@dataclass
class Context:
    """A Lambda context with a fixed amount of time left."""

    remaining_ms: int = 300_000
    function_name: str = "rebound-test"
    function_version: str = "$LATEST"
    invoked_function_arn: str = "arn:aws:lambda:us-east-1:123456789012:function:rebound-test"
    memory_limit_in_mb: int = 512
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    log_group_name: str = "/aws/lambda/rebound-test"
    log_stream_name: str = "test"

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_ms


def sqs_record(
    body: str, *, message_id: str | None = None, receive_count: int = 1, receipt: str = ""
) -> dict[str, Any]:
    message_id = message_id or str(uuid.uuid4())
    return {
        "messageId": message_id,
        "receiptHandle": receipt or f"handle-{message_id}",
        "body": body,
        "attributes": {
            "ApproximateReceiveCount": str(receive_count),
            "SentTimestamp": "1772874000000",
            "SenderId": "AIDAEXAMPLE",
            "ApproximateFirstReceiveTimestamp": "1772874000000",
        },
        "messageAttributes": {},
        "md5OfBody": hashlib.md5(body.encode()).hexdigest(),  # the SQS record field is an MD5
        "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:rebound-test-execution",
        "awsRegion": "us-east-1",
    }


def sqs_event(*bodies: str | dict[str, Any]) -> dict[str, Any]:
    return {"Records": [sqs_record(b if isinstance(b, str) else json.dumps(b)) for b in bodies]}


def fire(task_id: str, when: str = "2026-03-07T09:00:00Z") -> dict[str, Any]:
    return {"v": 1, "kind": "fire", "task_id": task_id, "scheduled_time": when}


def bus_event(detail_type: str, detail: dict[str, Any]) -> dict[str, Any]:
    """An EventBridge event as a rule delivers it to an SQS target."""
    return {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": detail_type,
        "source": "io.rebound",
        "account": "123456789012",
        "time": "2026-03-07T09:00:00Z",
        "region": "us-east-1",
        "resources": [],
        "detail": detail,
    }


def queue_messages(deps: Deps, queue: str) -> list[dict[str, Any]]:
    """Every message in a queue (visible, delayed or in flight), read from moto without receiving."""
    from moto.sqs.models import sqs_backends

    backend = sqs_backends["123456789012"]["us-east-1"]
    q = backend.get_queue(deps.settings.queue(queue).name)
    return [
        {
            "id": m.id,
            "body": _json_or_text(m.body),
            "raw": m.body,
            "attributes": {k: v.get("StringValue") for k, v in (m.message_attributes or {}).items()},
            "delayed_until_ms": m.delayed_until,
            "receive_count": m.approximate_receive_count,
        }
        for m in q._messages
    ]


def receive_event(deps: Deps, queue: str = "execution", max_messages: int = 10) -> dict[str, Any]:
    """Receive what is visible on a queue, as the Lambda event source mapping would, with real
    receipt handles (so the handler's visibility changes and the runtime's deletes act on it)."""
    ref = deps.settings.queue(queue)
    resp = deps.queues.client.receive_message(
        QueueUrl=ref.url,
        MaxNumberOfMessages=max_messages,
        MessageAttributeNames=["All"],
        MessageSystemAttributeNames=["All"],
    )
    records = []
    for m in resp.get("Messages", []):
        record = sqs_record(
            m["Body"],
            message_id=m["MessageId"],
            receive_count=int(m["Attributes"]["ApproximateReceiveCount"]),
            receipt=m["ReceiptHandle"],
        )
        record["messageAttributes"] = {
            k: {"stringValue": v.get("StringValue"), "dataType": v["DataType"]}
            for k, v in m.get("MessageAttributes", {}).items()
        }
        record["eventSourceARN"] = ref.arn
        records.append(record)
    return {"Records": records}


def delete_done(
    deps: Deps, event: dict[str, Any], response: dict[str, Any], queue: str = "execution"
) -> None:
    """What the event source mapping does after an invocation: delete every message not reported failed."""
    failed = {item["itemIdentifier"] for item in response.get("batchItemFailures", [])}
    for record in event["Records"]:
        if record["messageId"] not in failed:
            deps.queues.client.delete_message(
                QueueUrl=deps.settings.queue(queue).url, ReceiptHandle=record["receiptHandle"]
            )


def visible_at_ms(deps: Deps, queue: str, message_id: str) -> float:
    from moto.sqs.models import sqs_backends

    q = sqs_backends["123456789012"]["us-east-1"].get_queue(deps.settings.queue(queue).name)
    [m] = [m for m in q._messages if m.id == message_id]
    return float(m.visible_at)


def _json_or_text(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def outbox_events(deps: Deps) -> list[tuple[str, dict[str, Any]]]:
    """(detail type, detail) of every event written to the outbox, in write order."""
    from rebound.adapters.dynamo import from_item

    items = deps.store.client.scan(TableName=deps.settings.table("outbox"))["Items"]
    events = [from_item(i) for i in items]
    events.sort(key=lambda e: (e["created_at"], e["event_id"]))
    return [(e["detail_type"], json.loads(e["detail"])) for e in events]


def detail_types(deps: Deps) -> list[str]:
    return [t for t, _ in outbox_events(deps)]


def first(items: Iterable[Any]) -> Any:
    return next(iter(items))


REPO = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-c", "from rebound_cli.main import main; main()"]


def simulate(scenario: Path, report: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """Run ``rebound local simulate`` on a scenario file as a user would, writing the report."""
    return subprocess.run(
        [*CLI, "local", "simulate", str(scenario), "--report", str(report), "--quiet", *extra],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        timeout=240,
    )


def start_and_crash(deps: Deps, task_id: str, when: str = "2026-03-07T09:00:00Z") -> None:
    """Leave a run ``running`` (its invocation died after the claim), holding its slots."""
    import pytest

    from rebound.engine.executor import Executor, QueueMessage
    from rebound_local.instrument import CrashPlan, SimulatedCrash

    saved = deps.faults
    deps.faults = CrashPlan(frozenset({"after_claim"}), 1.0)
    with pytest.raises(SimulatedCrash):
        Executor(deps).process(QueueMessage(f"m-{task_id}-{when}", json.dumps(fire(task_id, when))), 300)
    deps.faults = saved


def crashed_message_returns(deps: Deps, task_id: str, when: str = "2026-03-07T09:00:00Z") -> str:
    """What the execution queue does once the lease of a run ``start_and_crash`` left ends: the
    claim's message, kept invisible until after then, comes back and fails the attempt (``TIMEOUT``)."""
    from rebound.engine.executor import Executor, QueueMessage

    body = json.dumps(fire(task_id, when))
    return Executor(deps).process(QueueMessage(f"m-{task_id}-{when}", body, receive_count=2), 300)


def start_virtual(started: list[Any], start: datetime, **kwargs: Any) -> tuple[Any, Any]:
    """A local stack on a fresh moto and a ``VirtualClock`` at ``start`` (``direct`` transport
    unless ``transport`` says otherwise); kept in ``started`` (the ``local_stacks`` fixture)."""
    from rebound_local import motopatch
    from rebound_local.clock import VirtualClock
    from rebound_local.cloud import reset_moto
    from rebound_local.stack import start_local

    reset_moto()
    motopatch.install()
    clock = VirtualClock(start)
    kwargs.setdefault("transport", "direct")
    stack = start_local(clock, **kwargs)
    started.append(stack)
    return stack, clock


def dead_letters(deps: Deps, count: int, task_id: str = "job") -> list[str]:
    """``count`` runs of task ``task_id`` dead-lettered by the engine on a terminal error."""
    from rebound.domain.tenancy import tenant_of
    from rebound.engine.executor import Executor, QueueMessage
    from rebound.engine.retry_scheduler import RetryScheduler

    tenant = tenant_of(task_id) or "acme"
    failing = {"type": "sim", "behavior": {"terminal_error": "LEDGER_LOCKED"}}
    register(deps, task(task_id, tenant=tenant, target=failing))
    run_ids = []
    for minute in range(count):
        when = f"2026-03-07T{9 + minute // 60:02d}:{minute % 60:02d}:00Z"
        message = QueueMessage(f"fire-{task_id}-{minute}", json.dumps(fire(task_id, when)))
        Executor(deps).process(message, 120)
        run_id = f"{task_id}:20260307T{9 + minute // 60:02d}{minute % 60:02d}00Z"
        assert RetryScheduler(deps).on_failed(run_id, 1) == "dead-lettered"
        run_ids.append(run_id)
    register(deps, task(task_id, tenant=tenant))  # the operator fixes the target
    return run_ids


def critical_dead_letter(deps: Deps, minute: int = 0, task_id: str = "payout") -> str:
    """A run of ``task_id`` dead-lettered behind a critical work order (the ``critical`` policy),
    its work order opened as the escalation handler opens it."""
    from rebound.engine.escalation import Escalation
    from rebound.engine.executor import Executor, QueueMessage
    from rebound.engine.retry_scheduler import RetryScheduler

    failing = {"type": "sim", "behavior": {"terminal_error": "LEDGER_LOCKED"}}
    register(deps, task(task_id, target=failing, retry_policy="critical"))
    when = f"2026-03-07T09:{minute:02d}:00Z"
    Executor(deps).process(QueueMessage(f"fire-{task_id}-{minute}", json.dumps(fire(task_id, when))), 120)
    run_id = f"{task_id}:20260307T09{minute:02d}00Z"
    assert RetryScheduler(deps).on_failed(run_id, 1) == "dead-lettered"
    [detail] = [d for t, d in outbox_events(deps) if t == "task.dead_lettered" and d.get("run_id") == run_id]
    order = Escalation(deps).on_dead_lettered(detail)
    assert order is not None and order.severity.value == "critical"
    return run_id


@contextmanager
def loopback_http(answer: Callable[[str, bytes, Mapping[str, str]], tuple[int, bytes]]) -> Iterator[str]:
    """A threaded HTTP server on 127.0.0.1 that answers each POST with ``answer(path, body,
    headers)`` (status, body); yields its base URL and stops on exit."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            status, raw = answer(self.path, body, dict(self.headers.items()))
            self.send_response(status)
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    with loopback_server(Handler) as base:
        yield base


def ledger_tasks(deps: Deps, transform: dict[str, Any] | None = None) -> None:
    """The ledger's four tasks, ``transform`` with that sim behaviour (default: it succeeds)."""
    register(
        deps,
        task("extract"),
        task("transform", target={"type": "sim", "behavior": transform or {"ok": True}}),
        task("load"),
        task("report"),
    )


def nightly_ledger(report_critical: bool = False) -> Any:
    """The issue's workstream: extract -> transform -> load (holds warehouse-write) -> report."""
    from rebound.domain.workstreams import Workstream, WorkstreamStep

    return Workstream(
        id="nightly-ledger",
        tenant="acme",
        steps=[
            WorkstreamStep(task="extract"),
            WorkstreamStep(task="transform", needs=["extract"]),
            WorkstreamStep(task="load", needs=["transform"], resources=["warehouse-write"]),
            WorkstreamStep(task="report", needs=["load"], critical=report_critical),
        ],
    )


def new_run(deps: Deps, run_id: str = "r1") -> Run:
    """A manual run committed through the store: its first audit record and an event."""
    now = deps.clock.now()
    run = Run(
        run_id=run_id,
        task_id="t",
        tenant="acme",
        trigger=Trigger.MANUAL,
        scheduled_for=now,
        created_at=now,
        updated_at=now,
    )
    uow = deps.store.unit_of_work("test", now)
    saved = uow.save_run(None, run, action="created")
    uow.emit(execution_updated(saved, None, now), f"run#{run_id}")
    uow.commit()
    return saved


def scheduled_run(
    task_id: str,
    due: datetime,
    *,
    start_s: float | None = None,
    took_s: float = 10,
    tenant: str = "acme",
    run_id: str | None = None,
    **fields: Any,
) -> Run:
    """A scheduled run due at ``due`` (succeeded by default): with ``start_s``, one attempt that
    started that long after ``due`` and took ``took_s``; other ``fields`` as given."""
    attempts = []
    if start_s is not None:
        began = due + timedelta(seconds=start_s)
        ended = began + timedelta(seconds=took_s)
        outcome = AttemptOutcome.SUCCEEDED
        attempts.append(
            Attempt(n=1, started_at=began, ended_at=ended, outcome=outcome, duration_ms=int(took_s * 1000))
        )
    data: dict[str, Any] = {
        "run_id": run_id or f"{task_id}-{due:%H%M}",
        "task_id": task_id,
        "tenant": tenant,
        "trigger": Trigger.SCHEDULE,
        "scheduled_for": due,
        "created_at": due,
        "updated_at": due,
        "due_at": due,
        "state": RunState.SUCCEEDED,
        "attempt": len(attempts),
        "attempts": attempts,
        **fields,
    }
    return Run(**data)


def save_runs(deps: Deps, *runs: Run) -> None:
    """Commit each run as created, as a writer of the run ledger would."""
    for run in runs:
        uow = deps.store.unit_of_work("test", run.created_at)
        uow.save_run(None, run, action="created")
        uow.commit()


@contextmanager
def loopback_server(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """Serve ``handler`` on 127.0.0.1 (a free port) in a thread; yields the base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    # A client that gave up (a timeout under test) breaks the pipe: expected, not worth a traceback.
    server.handle_error = lambda request, client_address: None  # type: ignore[method-assign]
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def local_stack_at(start: datetime) -> Iterator[Any]:
    """A local cloud stack on a virtual clock starting at ``start``; moto reset before and after."""
    from rebound_local.clock import VirtualClock
    from rebound_local.cloud import reset_moto
    from rebound_local.stack import start_local

    reset_moto()
    local = start_local(VirtualClock(start), transport="direct")
    try:
        yield local
    finally:
        local.stop()
        reset_moto()


def ended_run(deps: Deps, run_id: str, state: RunState) -> Run:
    """A manual run committed through the store with three records: created, its first attempt
    started, then ``state``."""
    run = new_run(deps, run_id)
    now = deps.clock.now()
    claimed = {"state": RunState.RUNNING, "attempt": 1, "attempts": [Attempt(n=1, started_at=now)]}
    for action, update in (("attempt-started", claimed), (state.value, {"state": state})):
        uow = deps.store.unit_of_work("test", now)
        run = uow.save_run(run, run.model_copy(update=update), action=action)
        uow.commit()
    return run


def open_order_on(deps: Deps, run_id: str) -> str:
    """Give the run an open work order, as a replayed run of a dead-lettered one still has while it
    runs again: the order (``opened``) and the run naming it, in one transaction. The order's id."""
    from rebound.domain.basics import Severity
    from rebound.domain.ids import work_order_id
    from rebound.domain.work_order import WorkOrder

    run = deps.store.get_run(run_id)
    assert run is not None, run_id
    now = deps.clock.now()
    order = WorkOrder(
        work_order_id=work_order_id(f"run#{run_id}"),
        subject=f"run#{run_id}",
        run_id=run_id,
        task_id=run.task_id,
        tenant=run.tenant,
        severity=Severity.CRITICAL,
        reason="retries_exhausted",
        attempts=3,
        runbook_url="https://runbooks.example.com/dead-lettered-run.md",
        opened_at=now,
    )
    uow = deps.store.unit_of_work("escalation", now)
    uow.save_work_order(None, order, action="opened", evidence={"subject": order.subject})
    linked = run.model_copy(update={"work_order_id": order.work_order_id})
    uow.save_run(run, linked, action="work-order-opened")
    uow.commit()
    return order.work_order_id
