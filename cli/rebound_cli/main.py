"""Entry point of the ``rebound`` console script."""

from __future__ import annotations


def main() -> None:
    from rebound_cli.app import cli

    cli()
