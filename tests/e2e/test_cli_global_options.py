"""The CLI's global options (``--env``, ``-o/--output``, ``--debug``, ``--version``) anywhere on the
command line, as the AWS CLI takes them: before the command, between a group and its command, or
after the command's own arguments. Two different values for one option are a usage error."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import click
import pytest
from click.testing import CliRunner, Result
from test_cli_harness import Cloud, cloud_fixture

from rebound_cli.app import cli
from rebound_cli.context import Overrides

pytestmark = pytest.mark.e2e
local_cloud = cloud_fixture()


def run(*args: str, cloud: Cloud | None = None) -> Result:
    """The CLI without the harness's leading ``--env local``: each test says where its options go."""
    overrides = Overrides(clock=cloud.clock, sqs_wait_s=0) if cloud else Overrides(sqs_wait_s=0)
    return CliRunner(env={"COLUMNS": "200"}).invoke(cli, list(args), obj=overrides, prog_name="rebound")


def every_command(group: click.Group = cli) -> Iterator[click.Command]:
    for command in group.commands.values():
        yield command
        if isinstance(command, click.Group):
            yield from every_command(command)


@pytest.mark.parametrize(
    ("command", "placed"),
    [
        (["dlq", "list"], ["dlq", "list", "--env", "local", "--output", "json"]),
        (["dlq", "list"], ["dlq", "--output", "json", "list", "--env", "local"]),
        (["dlq", "list"], ["--env", "local", "dlq", "list", "-o", "json"]),
        (["tasks", "list"], ["tasks", "list", "--output=json", "--env=local"]),
        (["runs", "list", "--limit", "5"], ["runs", "-ojson", "list", "--limit", "5", "--env", "local"]),
        (["workorders", "list"], ["workorders", "list", "--env", "local", "-o", "json"]),
        (
            ["policies", "show", "default"],
            ["policies", "show", "default", "--output", "json", "--env", "local"],
        ),
        (["notifications", "plan"], ["notifications", "plan", "--env", "local", "-o", "json"]),
        (["health"], ["health", "--env", "local", "--output", "json"]),
    ],
)
def test_a_global_option_anywhere_is_the_same_as_before_the_command(
    local_cloud: Cloud, command: list[str], placed: list[str]
) -> None:
    first = run("--env", "local", "--output", "json", *command, cloud=local_cloud)
    anywhere = run(*placed, cloud=local_cloud)

    assert first.exit_code in (0, 3), first.output
    assert anywhere.exit_code == first.exit_code, anywhere.output
    assert json.loads(anywhere.stdout) == json.loads(first.stdout)


def test_env_after_the_command_overrides_rebound_env(
    local_cloud: Cloud, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REBOUND_ENV", "nowhere")
    assert run("tasks", "list", cloud=local_cloud).exit_code == 4  # REBOUND_ENV: no such environment
    result = run("tasks", "list", "--env", "local", "-o", "json", cloud=local_cloud)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == []


def test_debug_after_the_command_shows_the_traceback(local_cloud: Cloud) -> None:
    def boom(**_: Any) -> None:
        raise RuntimeError("disk on fire")

    with local_cloud.hooked("before-call.dynamodb.Scan", boom):
        debug = local_cloud.cli("tasks", "list", "--debug")
    assert debug.exit_code == 1
    assert "error: unexpected RuntimeError: disk on fire" in debug.stderr
    assert "Traceback (most recent call last)" in debug.stderr


def test_the_same_value_twice_is_fine(local_cloud: Cloud) -> None:
    result = run("--env", "local", "-o", "json", "tasks", "list", "--env", "local", "--output", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == []


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        (
            ["--output", "json", "dlq", "list", "--output", "table"],
            "error: -o/--output is given twice with different values: 'json' (after 'rebound') and "
            "'table' (after 'rebound dlq list'); give it once (see 'rebound dlq list --help')",
        ),
        (
            ["dlq", "--env", "local", "list", "--env", "prod"],
            "error: --env is given twice with different values: 'local' (after 'rebound dlq') and "
            "'prod' (after 'rebound dlq list'); give it once (see 'rebound dlq list --help')",
        ),
        (
            ["--env", "local", "health", "--env", "prod"],
            "error: --env is given twice with different values: 'local' (after 'rebound') and "
            "'prod' (after 'rebound health'); give it once (see 'rebound health --help')",
        ),
        (
            ["dlq", "list", "--output", "xml"],
            "error: invalid value for '-o' / '--output': 'xml' is not one of "
            "'table', 'text', 'json', 'yaml', 'dot', 'mermaid' (see 'rebound dlq list --help')",
        ),
    ],
)
def test_conflicting_or_bad_values_are_one_usage_error(args: list[str], problem: str) -> None:
    result = run(*args)

    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.splitlines() == [problem]


def test_version_and_help_after_a_command() -> None:
    version = run("dlq", "list", "--version")
    assert version.exit_code == 0 and version.stdout.startswith("rebound, version ")

    help_text = run("notifications", "plan", "--help").stdout
    assert (
        "Global options (--env, -o/--output, --query, --profile, --region, --debug, --version) may be "
        "given here too" in " ".join(help_text.split())
    )
    assert "--env TEXT" not in help_text  # declared, but only the root lists them


def test_every_command_takes_the_global_options_unless_it_has_its_own() -> None:
    for command in every_command():
        opts = {opt for param in command.params for opt in param.opts}
        assert {"--env", "-o", "--output", "--debug", "--version"} <= opts, command.name

    # `rebound local up --env NAME` keeps its own meaning: the name of the local environment.
    up = cli.commands["local"].commands["up"]  # type: ignore[attr-defined]
    [env] = [p for p in up.params if "--env" in p.opts]
    assert env.name == "environment" and env.default == "local"
