"""The ``rebound`` command: the operator CLI and the local cloud."""

from __future__ import annotations

import sys

import click

from rebound_cli.local import local


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="rebound", prog_name="rebound")
def cli() -> None:
    """Rebound: scheduled and event-triggered tasks that are retried, dead-lettered and recovered.

    \b
    Examples:
      rebound local demo                 # the whole loop on this machine
      rebound local up                   # a local AWS stand-in with Rebound running in it
    """


cli.add_command(local)


if __name__ == "__main__":
    sys.exit(cli())
