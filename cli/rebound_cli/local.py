"""``rebound local``: run Rebound on this machine against an embedded AWS stand-in."""

from __future__ import annotations

import click


@click.group()
def local() -> None:
    """Run Rebound on this machine, against moto in server mode on 127.0.0.1."""


@local.command()
def demo() -> None:
    """Run the demo: three tasks through the retry loop, 36 minutes of schedule time in seconds.

    \b
    Example:
      rebound local demo
    """
    from rebound_local.demo import run_demo

    run_demo()
