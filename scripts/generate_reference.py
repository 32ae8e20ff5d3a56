"""Write the generated references: docs/reference/cli.md from the CLI's command tree and
docs/reference/api.md from docs/openapi.json. Run with `make reference`.

tests/unit/test_reference.py fails when a committed reference differs from what this writes, so a
command or route missing from the reference fails the build.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path
from typing import Any

import click

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "reference"
HEADER = "<!-- Written by `make reference`; do not edit by hand. -->"


def _commands(group: click.Group, path: tuple[str, ...]) -> list[tuple[tuple[str, ...], click.Command]]:
    found: list[tuple[tuple[str, ...], click.Command]] = []
    ctx = click.Context(group, info_name=" ".join(path))
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if command is None or command.hidden:
            continue
        found.append(((*path, name), command))
        if isinstance(command, click.Group):
            found += _commands(command, (*path, name))
    return found


GLOBAL = frozenset({"env", "output", "debug", "version", "global_env", "global_output", "global_debug"})
"""The global options, which every command accepts (said once, at the top)."""


def _help(command: click.Command) -> str:
    """The command's help as ``--help`` shows it, without click's no-rewrap markers."""
    lines = [line.rstrip() for line in click.unstyle(command.help or "").splitlines() if line.strip() != "\b"]
    return textwrap.dedent("\n".join(lines)).strip()


def _option_rows(command: click.Command) -> list[str]:
    rows = []
    for param in command.params:
        if isinstance(param, click.Option) and param.name not in GLOBAL:
            names = ", ".join(f"`{opt}`" for opt in [*param.opts, *param.secondary_opts])
            helptext = " ".join((param.help or "").split()).replace("|", "\\|")
            rows.append(f"| {names} | {helptext} |")
    return rows


def cli_reference() -> str:
    from rebound_cli.app import cli

    lines = [
        "# CLI reference",
        "",
        HEADER,
        "",
        "Every command of `rebound`, with its options and examples, as `--help` prints them. Global",
        "options (`--env`, `-o/--output`, `--debug`, `--version`) may be given anywhere on the line.",
        "",
    ]
    for path, command in _commands(cli, ("rebound",)):
        arguments = " ".join(p.human_readable_name for p in command.params if isinstance(p, click.Argument))
        lines += [f"## `{' '.join(path)}`", ""]
        options = any(isinstance(p, click.Option) and p.name not in GLOBAL for p in command.params)
        usage = " ".join(path) + (" [OPTIONS]" if options else "") + (f" {arguments}" if arguments else "")
        lines += ["```", usage, "```", ""]
        if command.help:
            lines += ["```text", _help(command), "```", ""]
        rows = _option_rows(command)
        if rows:
            lines += ["| option | what it does |", "|---|---|", *rows, ""]
    return "\n".join(lines).rstrip() + "\n"


def _body_text(operation: dict[str, Any]) -> str:
    content = (operation.get("requestBody") or {}).get("content", {})
    schema = content.get("application/json", {}).get("schema", {})
    ref = schema.get("$ref") or next((s.get("$ref") for s in schema.get("anyOf", []) if "$ref" in s), None)
    return f"`{ref.rsplit('/', 1)[-1]}`" if ref else ""


def api_reference() -> str:
    spec = json.loads((ROOT / "docs" / "openapi.json").read_text())
    lines = [
        "# Ops API reference",
        "",
        HEADER,
        "",
        "Every route of the operations API (API Gateway, IAM/SigV4 authorization), from",
        "`docs/openapi.json`, which is the whole contract (request and response schemas included)",
        "and is also served at `GET /openapi.json`. Errors are JSON with a stable `code`.",
        "",
        "| method | path | what it does | body |",
        "|---|---|---|---|",
    ]
    for path, operations in sorted(spec["paths"].items()):
        for method, operation in sorted(operations.items()):
            summary = str(operation.get("summary", "")).replace("|", "\\|")
            lines.append(f"| `{method.upper()}` | `{path}` | {summary} | {_body_text(operation)} |")
    return "\n".join(lines) + "\n"


def expected() -> dict[str, str]:
    return {"cli.md": cli_reference(), "api.md": api_reference()}


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    for name, text in expected().items():
        (OUT / name).write_text(text)
        print(f"wrote docs/reference/{name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
