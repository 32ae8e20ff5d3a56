"""``rebound local up`` as a user meets it: a subprocess, any AWS client against its endpoint.

The AWS CLI is used where it is installed (it is optional: boto3 does the same calls otherwise).
One server is shared by the tests of this module, in order: what they check builds up.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
TIME_SCALE = "60"  # one wall second is one schedule minute
ENV = {
    "AWS_ACCESS_KEY_ID": "anything",
    "AWS_SECRET_ACCESS_KEY": "anything",
    "AWS_DEFAULT_REGION": "us-east-1",
}
CLI = [sys.executable, "-c", "from rebound_cli.main import main; main()"]
MALFORMED = '{"kind": "fire", "task_id": "Not A Valid Id!"'
TASKS = """
tasks:
  - id: up-heartbeat
    tenant: acme
    schedule: {cron: "* * * * *", timezone: UTC}
    target: {type: sim, behavior: {ok: true}}
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _eventually(check: Callable[[], Any], timeout: float = 60.0, every: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"condition not met within {timeout:.0f}s (last: {last!r})")


class UpProcess:
    def __init__(self, port: int, state_dir: Path, *extra: str, sigint_ignored: bool = False) -> None:
        self.port = port
        self.endpoint = f"http://127.0.0.1:{port}"
        cmd = [
            sys.executable,
            "-c",
            "from rebound_cli.main import main; main()",
            "local",
            "up",
            "--no-view",
            "--port",
            str(port),
            "--time-scale",
            TIME_SCALE,
            "--state-dir",
            str(state_dir),
            *extra,
        ]
        self.proc = subprocess.Popen(
            cmd,
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, **ENV, "PYTHONUNBUFFERED": "1"},
            # as a shell without job control starts a background command
            preexec_fn=(lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if sigint_ignored else None,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        _eventually(lambda: "ready" in self.lines or self.proc.poll() is not None, timeout=90)
        assert self.proc.poll() is None, "\n".join(self.lines)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def client(self, service: str, **kwargs: Any) -> Any:
        session = boto3.session.Session(
            aws_access_key_id="anything", aws_secret_access_key="anything", region_name="us-east-1"
        )
        return session.client(service, endpoint_url=self.endpoint, **kwargs)  # type: ignore[call-overload]

    def resources(self) -> dict[str, Any]:
        value = self.client("ssm").get_parameter(Name="/rebound/local/resources")["Parameter"]["Value"]
        return dict(json.loads(value))

    def interrupt(self, timeout: float = 60.0) -> int:
        self.proc.send_signal(signal.SIGINT)
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            self._reader.join(timeout=5)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


@pytest.fixture(scope="module")
def state_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("up-state")


@pytest.fixture(scope="module")
def up(state_dir: Path) -> Iterator[UpProcess]:
    server = UpProcess(_free_port(), state_dir)
    try:
        yield server
    finally:
        server.kill()


def _scan(server: UpProcess, table_logical: str) -> list[dict[str, Any]]:
    from rebound.adapters.dynamo import from_item

    table = server.resources()["tables"][table_logical]
    ddb = server.client("dynamodb")
    items = ddb.scan(TableName=table, ConsistentRead=True).get("Items", [])
    return [from_item(item) for item in items]


def test_up_prints_its_endpoint_and_how_to_use_it(up: UpProcess) -> None:
    text = "\n".join(up.lines)
    assert f"endpoint {up.endpoint}" in text
    assert f"AWS_ENDPOINT_URL={up.endpoint}" in text
    assert "rebound --env local" in text


def test_any_aws_client_lists_the_provisioned_queues(up: UpProcess) -> None:
    if shutil.which("aws"):
        out = subprocess.run(
            ["aws", "--endpoint-url", up.endpoint, "--region", "us-east-1", "sqs", "list-queues"],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, **ENV},
            timeout=60,
        ).stdout
        urls = json.loads(out)["QueueUrls"]
    else:  # the AWS CLI is optional; boto3 makes the same call
        urls = up.client("sqs").list_queues()["QueueUrls"]
    names = {url.rsplit("/", 1)[-1] for url in urls}
    assert {"rebound-local-execution", "rebound-local-dlq", "rebound-local-retry"} <= names


def test_a_malformed_message_reaches_the_dlq_with_one_work_order(up: UpProcess) -> None:
    queues = up.resources()["queues"]
    sqs = up.client("sqs")
    sqs.send_message(QueueUrl=queues["execution"]["url"], MessageBody=MALFORMED)

    def invalid_orders() -> list[dict[str, Any]]:
        return [o for o in _scan(up, "workorders") if o.get("error_code") == "INVALID_MESSAGE"]

    orders = _eventually(invalid_orders)
    assert len(orders) == 1
    assert orders[0]["subject"].startswith("msg#")
    attrs = sqs.get_queue_attributes(
        QueueUrl=queues["dlq"]["url"],
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    assert (
        int(attrs["ApproximateNumberOfMessages"]) + int(attrs["ApproximateNumberOfMessagesNotVisible"]) >= 1
    )


def _register_heartbeat(up: UpProcess, folder: Path) -> None:
    """``rebound tasks apply`` of the heartbeat task, as a user runs it against ``local up``."""
    _apply(up, folder, TASKS)


def _apply(up: UpProcess, folder: Path, document: str) -> None:
    """``rebound tasks apply`` of a task document, as a user runs it against ``local up``."""
    tasks = folder / "tasks.yaml"
    tasks.write_text(document)
    done = subprocess.run(
        [*CLI, "--env", "local", "tasks", "apply", "-f", str(tasks), "--yes"],
        capture_output=True,
        text=True,
        env={**os.environ, **ENV, "AWS_ENDPOINT_URL": up.endpoint},
        cwd=REPO,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def _succeeded_heartbeats(up: UpProcess) -> list[dict[str, Any]]:
    return [r for r in _scan(up, "runs") if r["task_id"] == "acme.up-heartbeat" and r["state"] == "succeeded"]


def test_a_task_registered_through_the_cli_fires(up: UpProcess, tmp_path: Path) -> None:
    _register_heartbeat(up, tmp_path)
    _eventually(lambda: len(_succeeded_heartbeats(up)) >= 2, timeout=60)


def test_ctrl_c_stops_cleanly_and_a_restart_keeps_the_task_and_its_runs(
    up: UpProcess, state_dir: Path, tmp_path: Path
) -> None:
    if not any(t["task_id"] == "acme.up-heartbeat" for t in _scan(up, "tasks")):
        _register_heartbeat(up, tmp_path)  # run on its own: the registration test has not
    _eventually(lambda: len(_succeeded_heartbeats(up)) >= 1, timeout=60)
    runs_before = {r["run_id"] for r in _scan(up, "runs") if r["task_id"] == "acme.up-heartbeat"}
    orders_before = {o["work_order_id"] for o in _scan(up, "workorders")}

    assert up.interrupt() == 0, "\n".join(up.lines[-20:])
    assert any(line.startswith("state saved to") for line in up.lines)
    assert (state_dir / "state.json").exists()

    again = UpProcess(_free_port(), state_dir)
    try:
        assert any(line.startswith("restored from") for line in again.lines)
        tasks = {t["task_id"] for t in _scan(again, "tasks")}
        assert "acme.up-heartbeat" in tasks
        runs_after = {r["run_id"] for r in _scan(again, "runs") if r["task_id"] == "acme.up-heartbeat"}
        assert runs_before <= runs_after
        assert orders_before <= {o["work_order_id"] for o in _scan(again, "workorders")}

        # The restored schedule keeps firing.
        def more_runs() -> bool:
            current = {r["run_id"] for r in _scan(again, "runs") if r["task_id"] == "acme.up-heartbeat"}
            return len(current - runs_before) >= 1

        _eventually(more_runs, timeout=60)
        assert again.interrupt() == 0
    finally:
        again.kill()


def test_up_serves_the_console_and_prints_its_url(state_dir: Path) -> None:
    up = UpProcess(_free_port(), state_dir, "--console-port", "0")  # 8765 may be anyone's
    try:
        check_console(up)
    finally:
        up.kill()


def test_ctrl_c_stops_it_even_when_started_with_sigint_ignored(tmp_path: Path) -> None:
    """A shell without job control starts background commands with SIGINT ignored, and Python then
    installs no handler of its own: ``up`` installs one, so Ctrl-C still stops it cleanly."""
    up = UpProcess(_free_port(), tmp_path / "state", "--console-port", "0", sigint_ignored=True)
    try:
        assert up.interrupt(timeout=60) == 0, "\n".join(up.lines[-20:])
        assert "stopped" in up.lines
    finally:
        up.kill()


def check_console(up: UpProcess) -> None:
    import urllib.error
    import urllib.request

    url = next(line.split(" ", 1)[1] for line in up.lines if line.startswith("console http://127.0.0.1:"))
    base, token = url.split("/?token=")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"{base}/api/health", timeout=30)
    assert refused.value.code == 401
    request = urllib.request.Request(f"{base}/api/queues", headers={"X-Console-Token": token})
    with urllib.request.urlopen(request, timeout=30) as response:
        queues = {q["queue"] for q in json.loads(response.read())}
    assert {"execution", "retry", "escalation", "dlq"} <= queues
