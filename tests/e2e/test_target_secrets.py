"""A planted secret never leaves the request: not in a table, not in a log line (issue 14).

Tasks call a loopback receiver with an ``Authorization`` header read from (moto) SSM at call
time. The receiver echoes every header it gets into its answers, so a success, a retried failure
and a terminal failure all hand the secret back; afterwards every item of every table and every
log line captured while the local cloud ran are searched for it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest

from rebound.adapters.dynamo.codec import from_item
from rebound.domain.run import RunState
from rebound_local.stack import LocalStack
from support import local_stack_at, loopback_server, register, task

pytestmark = pytest.mark.e2e
START = datetime(2026, 3, 7, 8, 59, tzinfo=UTC)
PLANTED = "planted-9d4b7e21c0a3f5e8"
TOKEN_PARAM = "/rebound/local/tenants/acme/api-token"
STATUS = {"/ok": 200, "/flaky": 503, "/denied": 403}


@pytest.fixture
def receiver() -> Iterator[tuple[str, list[dict[str, str]]]]:
    seen: list[dict[str, str]] = []

    class Echo(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            headers = dict(self.headers.items())
            seen.append(headers)
            body = json.dumps(
                {"echo": headers, "detail": f"you sent {headers.get('Authorization')}"}
            ).encode()
            self.send_response(STATUS[self.path])
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    with loopback_server(Echo) as base:
        yield f"{base}", seen


@pytest.fixture
def stack() -> Iterator[LocalStack]:
    with local_stack_at(START) as local:
        yield local


def every_item(stack: LocalStack) -> list[dict[str, Any]]:
    """Every item of every table, its document read (stored deflated, it would hide a secret from
    a search of the raw bytes)."""
    dynamodb = stack.cloud.client("dynamodb")
    items: list[dict[str, Any]] = []
    for table in stack.settings.tables.values():
        for page in dynamodb.get_paginator("scan").paginate(TableName=table):
            items.extend(from_item(item) for item in page["Items"])
    return items


def test_a_planted_secret_is_in_no_table_item_and_no_log_line(
    stack: LocalStack, receiver: tuple[str, list[dict[str, str]]], caplog: pytest.LogCaptureFixture
) -> None:
    base, seen = receiver
    stack.cloud.client("ssm").put_parameter(Name=TOKEN_PARAM, Value=PLANTED, Type="SecureString")
    caplog.set_level(logging.DEBUG)  # after the test's own write of the secret, which the SDK logs
    header = {"Authorization": {"secret": f"ssm:{TOKEN_PARAM}", "prefix": "Bearer "}}
    quick = {"extends": "default", "base_delay": "20s", "max_attempts": 2}
    register(
        stack.deps,
        *(
            task(
                name,
                schedule={"cron": "* * * * *"},
                retry_policy=quick,
                target={"type": "http", "url": f"{base}/{name}", "headers": header},
            )
            for name in ("ok", "flaky", "denied")
        ),
    )

    stack.runtime.run_virtual(START + timedelta(minutes=4))

    states = {(r.task_id, r.state) for r in stack.deps.store.scan_runs()}
    assert ("ok", RunState.SUCCEEDED) in states
    assert ("flaky", RunState.DEAD_LETTERED) in states and ("denied", RunState.DEAD_LETTERED) in states
    assert seen and all(h["Authorization"] == f"Bearer {PLANTED}" for h in seen)
    stored = json.dumps(every_item(stack))
    assert "HTTP_403" in stored and "HTTP_503" in stored and TOKEN_PARAM in stored
    assert PLANTED not in stored
    logged = [r.getMessage() + repr(r.__dict__) for r in caplog.records]
    assert logged
    assert not [line for line in logged if PLANTED in line]
