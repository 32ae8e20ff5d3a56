"""Following a run until it settles: ``tasks run --wait`` and ``runs show --watch``.

A run has settled when Rebound owes it no more work: succeeded, dead-lettered, skipped,
cancelled or superseded. The exit code is the outcome: 0 succeeded, 1 any other settled state
(the run failed or was closed by hand), 6 not settled within ``--timeout`` (look again later).
"""

from __future__ import annotations

from collections.abc import Callable

import click

from rebound.domain.errors import RunNotFound
from rebound.domain.run import Run, RunState
from rebound.domain.states import TERMINAL
from rebound_cli import output as out
from rebound_cli.context import App
from rebound_cli.errors import EXIT_FAILED, EXIT_UNAVAILABLE

SETTLED = TERMINAL | {RunState.DEAD_LETTERED}
INTERVAL = click.option(
    "--interval",
    type=click.FloatRange(min=0.1),
    default=2.0,
    show_default=True,
    help="seconds between looks at the run",
)
TIMEOUT = click.option(
    "--timeout",
    "wait_timeout",
    type=click.FloatRange(min=0),
    default=3600.0,
    show_default=True,
    help="give up waiting after this many seconds (exit 6)",
)


def follow(
    app: App, run_id: str, interval: float, timeout: float, on_look: Callable[[Run | None], None]
) -> Run:
    """Look at the run every ``interval`` seconds until it settles (``on_look`` sees each look; a
    run not recorded yet is None); exit 6 after ``timeout`` seconds of waiting."""
    waited = 0.0
    ops = app.runs()
    while True:
        try:
            run: Run | None = ops.get(run_id)
        except RunNotFound:
            run = None  # queued, not claimed yet
        on_look(run)
        if run is not None and run.state in SETTLED:
            return run
        if waited >= timeout:
            state = run.state.value if run is not None else "queued"
            out.note(
                f"run {run_id} is still {state} after {timeout:g}s; look again: rebound runs show {run_id}"
            )
            raise click.exceptions.Exit(EXIT_UNAVAILABLE)
        app.sleep(interval)
        waited += interval


def exit_with_outcome(run: Run) -> None:
    """Exit 0 for a run that succeeded, 1 for any other settled state."""
    if run.state is not RunState.SUCCEEDED:
        raise click.exceptions.Exit(EXIT_FAILED)
