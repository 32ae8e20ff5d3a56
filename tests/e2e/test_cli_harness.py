"""The harness the CLI's end-to-end tests share, and the CLI's global behaviour.

Each test module starts the local cloud once (moto in server mode on loopback, provisioned from
the CDK definitions, with the runtime under a virtual clock), points the environment at it the
way an operator would (``AWS_ENDPOINT_URL``, fake credentials, ``AWS_REGION``), and calls the
real ``rebound`` command through click's ``CliRunner``. The CLI finds every resource through
the SSM parameter, as on AWS. Virtual time moves only when a test says so. The CLI talks HTTP to
the endpoint, as any outside client; the handlers in the runtime reach moto on the ``direct``
transport (the wire is the demo's and ``rebound local up``'s to exercise: ``test_retry_loop.py::
test_demo_scenario``, ``test_local_up.py``), so hours of schedule time pass in seconds.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import botocore.loaders
import click
import pytest
from click.testing import CliRunner, Result

from rebound.domain.run import Run
from rebound.engine.deps import Deps
from rebound_cli.app import cli
from rebound_cli.context import Overrides
from rebound_local.clock import VirtualClock
from rebound_local.cloud import reset_moto
from rebound_local.stack import LocalStack, start_local

pytestmark = pytest.mark.e2e
START = datetime(2026, 3, 7, 8, 59, tzinfo=UTC)
Hook = tuple[str, Callable[..., Any]]
LOADER = botocore.loaders.create_loader()
"""One botocore loader (and its cache of service models) for every session the tests' CLI makes:
a real ``rebound`` process reads them once per run; here it would be once per command."""


@dataclass
class Cloud:
    """The local cloud, and the ``rebound`` CLI pointed at it."""

    stack: LocalStack
    clock: VirtualClock
    requests: Counter[str] = field(default_factory=Counter)
    """Every HTTP request the CLI's sessions sent, as ``service:Operation`` (botocore ``before-send``)."""
    hooks: list[Hook] = field(default_factory=list)
    """Extra botocore event hooks for the CLI's next sessions (fault injection)."""
    sleeps: list[float] = field(default_factory=list)
    while_sleeping: Callable[[float], None] | None = None
    """What happens while the CLI sleeps (polls, backoff): the system running, say."""

    @property
    def deps(self) -> Deps:
        return self.stack.deps  # type: ignore[no-any-return]

    def _on_session(self, session: boto3.session.Session) -> None:
        session._session.register_component("data_loader", LOADER)

        def count(request: Any, event_name: str, **_: Any) -> None:
            parts = event_name.split(".")
            self.requests[f"{parts[1]}:{parts[2]}"] += 1

        session.events.register("before-send", count)
        for event, handler in self.hooks:
            session.events.register(event, handler)

    def _sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        if self.while_sleeping is not None:
            self.while_sleeping(seconds)

    def cli(self, *args: str, input: str | None = None) -> Result:
        # A test that gives input plays a person at a terminal; without input there is none.
        overrides = Overrides(
            clock=self.clock,
            on_session=self._on_session,
            sleep=self._sleep,
            sqs_wait_s=0,
            terminal=input is not None,
        )
        # A fixed width: table assertions must not depend on the terminal the tests run in.
        return CliRunner(env={"COLUMNS": "200"}).invoke(
            cli, ["--env", "local", *args], obj=overrides, input=input
        )

    def ok(self, *args: str, input: str | None = None) -> Result:
        result = self.cli(*args, input=input)
        assert result.exit_code == 0, (result.exit_code, result.output, result.exception)
        return result

    def json(self, *args: str, input: str | None = None) -> Any:
        return json.loads(self.ok("-o", "json", *args, input=input).stdout)

    @contextmanager
    def hooked(self, event: str, handler: Callable[..., Any]) -> Iterator[None]:
        """The CLI's sessions run ``handler`` on the botocore ``event`` within the block."""
        self.hooks.append((event, handler))
        try:
            yield
        finally:
            self.hooks.remove((event, handler))

    def tick(self, seconds: float = 1.0) -> None:
        """Let virtual time pass without running anything (so released messages become visible)."""
        self.clock.advance_to(self.clock.now() + timedelta(seconds=seconds))

    def run_for(self, delta: timedelta) -> None:
        """Run the whole system for ``delta`` of virtual time."""
        self.stack.runtime.run_virtual(self.clock.now() + delta)

    def runs(self) -> dict[str, Run]:
        return {r.run_id: r for r in self.deps.store.scan_runs()}


def cloud_fixture(transport: str = "direct", name: str = "local_cloud") -> Any:
    """A module-scoped fixture called ``name``: one local cloud per test module."""

    @pytest.fixture(scope="module", name=name)
    def local_cloud() -> Iterator[Cloud]:
        reset_moto()
        clock = VirtualClock(START)
        stack = start_local(clock, transport=transport)
        patch = pytest.MonkeyPatch()
        patch.setenv("AWS_ENDPOINT_URL", stack.cloud.endpoint_url)
        patch.setenv("AWS_ACCESS_KEY_ID", "operator-key")
        patch.setenv("AWS_SECRET_ACCESS_KEY", "operator-secret")
        patch.setenv("AWS_REGION", "us-east-1")
        patch.delenv("AWS_PROFILE", raising=False)
        patch.delenv("REBOUND_ENV", raising=False)
        try:
            yield Cloud(stack, clock)
        finally:
            patch.undo()
            stack.stop()
            reset_moto()

    return local_cloud


local_cloud = cloud_fixture()


# --------------------------------------------------------------------------- global behaviour


def _commands(group: click.Group, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    for name, command in group.commands.items():
        path = (*prefix, name)
        yield path
        if isinstance(command, click.Group):
            yield from _commands(command, path)


def test_every_command_and_group_has_help_with_examples() -> None:
    missing = []
    for path in [(), *_commands(cli)]:
        result = CliRunner().invoke(cli, [*path, "--help"])
        assert result.exit_code == 0, path
        if "Example" not in result.output:
            missing.append(" ".join(("rebound", *path)))
    assert not missing, f"commands without examples in --help: {missing}"


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        (["runs", "skip", "some-run"], "error: missing option '--reason' (see 'rebound runs skip --help')"),
        (
            ["--output", "xml", "health"],
            "error: invalid value for '-o' / '--output': 'xml' is not one of "
            "'table', 'text', 'json', 'yaml', 'dot', 'mermaid' (see 'rebound --help')",
        ),
        (
            ["runs", "list", "--limit", "0"],
            "error: invalid value for '--limit': 0 is not in the range x>=1 (see 'rebound runs list --help')",
        ),
        (["dlq", "nope"], "error: no such command 'nope' (see 'rebound dlq --help')"),
        (
            ["workorders", "show"],
            "error: missing argument 'WORK_ORDER_ID' (see 'rebound workorders show --help')",
        ),
    ],
)
def test_a_usage_error_is_one_line_naming_the_problem_and_exit_2(args: list[str], problem: str) -> None:
    result = CliRunner().invoke(cli, args, prog_name="rebound")

    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.splitlines() == [problem]


def test_a_group_without_a_command_still_shows_its_help() -> None:
    result = CliRunner().invoke(cli, ["dlq"], prog_name="rebound")

    assert result.exit_code == 2
    assert "Usage: rebound dlq" in result.output and "Examples:" in result.output


def test_an_unknown_environment_is_one_line_and_exit_4(local_cloud: Cloud) -> None:
    result = CliRunner().invoke(cli, ["--env", "nowhere", "tasks", "list"], obj=Overrides(sqs_wait_s=0))

    assert result.exit_code == 4
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "no Rebound environment 'nowhere'" in lines[0] and "/rebound/nowhere/resources" in lines[0]


def test_env_defaults_to_rebound_env(local_cloud: Cloud, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REBOUND_ENV", "local")
    result = CliRunner().invoke(cli, ["-o", "json", "tasks", "list"], obj=Overrides(sqs_wait_s=0))

    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == []


def test_an_unexpected_error_is_one_line_and_debug_shows_the_traceback(local_cloud: Cloud) -> None:
    def boom(**_: Any) -> None:
        raise RuntimeError("disk on fire\nsecond line")

    local_cloud.hooks.append(("before-call.dynamodb.Scan", boom))
    try:
        plain = local_cloud.cli("tasks", "list")
        debug = local_cloud.cli("--debug", "tasks", "list")
    finally:
        local_cloud.hooks.clear()

    assert plain.exit_code == 1
    assert plain.stderr.strip() == (
        "error: unexpected RuntimeError: disk on fire second line (run again with --debug for the traceback)"
    )
    assert debug.exit_code == 1
    assert "Traceback (most recent call last)" in debug.stderr


def test_every_client_the_cli_builds_uses_the_endpoint_from_the_environment(local_cloud: Cloud) -> None:
    local_cloud.requests.clear()
    local_cloud.ok("tasks", "list")

    # Only the local cloud was reached (the endpoint would refuse anything else), with SSM first.
    assert local_cloud.requests["ssm:GetParameter"] == 1
    assert os.environ["AWS_ENDPOINT_URL"] == local_cloud.stack.cloud.endpoint_url
