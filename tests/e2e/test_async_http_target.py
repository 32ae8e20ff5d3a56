"""An ``http`` target with ``mode: async`` on the local cloud: the request carries the completion
token, a 2xx answer only means the work started, and the worker's reports on the bus (through
``rebound.worker.Completion``) move the run on."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest

from rebound.domain.run import RunState
from rebound.worker import Completion
from rebound_local.stack import LocalStack
from support import local_stack_at, loopback_server, register, task

pytestmark = pytest.mark.e2e
START = datetime(2026, 3, 7, 8, 59, tzinfo=UTC)


@pytest.fixture
def worker_endpoint() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """A loopback endpoint that accepts the work (202) and keeps each request body."""
    bodies: list[dict[str, Any]] = []

    class Accept(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            bodies.append(json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0")))))
            self.send_response(202)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    with loopback_server(Accept) as base:
        yield f"{base}/export", bodies


@pytest.fixture
def stack() -> Iterator[LocalStack]:
    with local_stack_at(START) as local:
        yield local


def test_an_async_http_target_gets_a_token_and_its_worker_completes_the_run_over_the_bus(
    stack: LocalStack, worker_endpoint: tuple[str, list[dict[str, Any]]]
) -> None:
    url, bodies = worker_endpoint
    register(
        stack.deps,
        task(
            "export",
            schedule={"cron": "0 * * * *"},
            target={"type": "http", "url": url, "mode": "async"},
            heartbeat_timeout="10m",
            max_duration="2h",
        ),
    )
    stack.runtime.run_virtual(START + timedelta(minutes=3))

    [run] = [r for r in stack.deps.store.scan_runs() if r.task_id == "export"]
    assert run.state is RunState.RUNNING  # the 202 started the work; it did not finish the run
    [body] = bodies
    worker = Completion.from_payload(body, stack.settings.bus_name, client=stack.cloud.client("events"))
    assert repr(worker).endswith("token=***)")  # the token never shows in a worker's logs

    worker.heartbeat(progress=0.5)
    stack.runtime.run_virtual(START + timedelta(minutes=4))
    beating = stack.deps.store.get_run(run.run_id)
    assert beating is not None and beating.state is RunState.RUNNING and beating.progress == 0.5

    worker.complete(output={"rows": 1200})
    stack.runtime.run_virtual(START + timedelta(minutes=5))
    done = stack.deps.store.get_run(run.run_id)
    assert done is not None and done.state is RunState.SUCCEEDED

    worker.complete()  # a second completion is refused and changes nothing
    stack.runtime.run_virtual(START + timedelta(minutes=6))
    again = stack.deps.store.get_run(run.run_id)
    assert again is not None and again.state is RunState.SUCCEEDED and again.rev == done.rev
