"""CLI arguments hypothesis builds get a clear error, never a traceback (issue 14).

Every command except the long-running ones (``local``, ``console``), with arguments drawn from
the CLI's own option names and values that are wrong in every way: negative, huge, empty, not a
time, not an id, control characters. Whatever the result, the exit code is one of the CLI's
documented codes and neither stream holds a traceback. Changes are declined at any prompt.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from test_cli_harness import Cloud, _commands, cloud_fixture

from rebound_cli.app import cli

pytestmark = pytest.mark.e2e
local_cloud = cloud_fixture()

COMMANDS = sorted(p for p in _commands(cli) if p[0] not in {"local", "console"})
WORDS = [
    "--limit",
    "--since",
    "--until",
    "--tenant",
    "--state",
    "--count",
    "--reason",
    "--task",
    "--yes",
    "--dry-run",
    "--error-code",
    "--rate",
    "--allow-past",
    "-f",
    "--timeout",
    "--max-attempts",
    "-1",
    "0",
    "99999999999999999999",
    "1.5",
    "",
    "2h",
    "yesterday",
    "2026-13-45T99:99:99Z",
    "nightly",
    "nightly:20260307T090000Z",
    "run#x",
    "wo-0001",
    "default",
    "paused",
    "x" * 600,
    "\x00",
    "é",
    "/nonexistent.yaml",
    "max_attempts=0",
    "base_delay=-5s",
    "key",
    "=",
]
EXIT_CODES = {0, 1, 2, 3, 4, 5, 6}


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(command=st.sampled_from(COMMANDS), args=st.lists(st.sampled_from(WORDS), max_size=5))
@example(command=("sla", "report"), args=["--since", "99999999999999999999"])
@example(command=("tasks", "dryrun"), args=["-f", "/nonexistent.yaml", "--window", "0"])
def test_any_arguments_get_a_clear_error_never_a_traceback(
    local_cloud: Cloud, command: tuple[str, ...], args: list[str]
) -> None:
    result = local_cloud.cli(*command, *args, input="n\n")

    assert result.exit_code in EXIT_CODES, (command, args, result.output, result.exception)
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        command,
        args,
        repr(result.exception),
    )
    assert "Traceback" not in result.output and "Traceback" not in result.stderr, (command, args)
