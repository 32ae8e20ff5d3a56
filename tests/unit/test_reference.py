"""The generated references are current: every CLI command and every ops API route is in them."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "generate_reference", ROOT / "scripts" / "generate_reference.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_references_are_what_the_commands_and_routes_say() -> None:
    on_disk = {p.name: p.read_text() for p in (ROOT / "docs" / "reference").glob("*.md")}
    assert on_disk == generator().expected(), "docs/reference is stale: run `make reference`"


def test_every_command_and_every_route_has_its_entry() -> None:
    from rebound_cli.app import cli

    gen = generator()
    cli_page = (ROOT / "docs" / "reference" / "cli.md").read_text()
    for path, _ in gen._commands(cli, ("rebound",)):
        assert f"## `{' '.join(path)}`" in cli_page
    api_page = (ROOT / "docs" / "reference" / "api.md").read_text()
    for route, operations in json.loads((ROOT / "docs" / "openapi.json").read_text())["paths"].items():
        for method in operations:
            assert f"| `{method.upper()}` | `{route}` |" in api_page
