"""Every crash point the code declares is listed in docs/architecture/guarantees.md, and the code reaches only
declared points."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rebound.engine.crashpoints import CRASH_POINTS

pytestmark = pytest.mark.unit
REPO = Path(__file__).resolve().parents[2]


def test_every_declared_crash_point_is_documented() -> None:
    doc = (REPO / "docs" / "architecture" / "guarantees.md").read_text(encoding="utf-8")
    missing = [name for name in CRASH_POINTS if f"| `{name}` |" not in doc]
    assert missing == [], f"docs/architecture/guarantees.md does not list {missing}"


def test_the_code_reaches_only_declared_crash_points_and_reaches_each_one() -> None:
    source = "\n".join(p.read_text(encoding="utf-8") for p in (REPO / "functions" / "rebound").rglob("*.py"))
    reached = set(re.findall(r"(?:reached\(|crash_point=)(?:cp\.)?([A-Z][A-Z_]+)\b", source)) - {"NAME"}
    names = {name.upper() for name in CRASH_POINTS}
    assert reached <= names, f"undeclared: {reached - names}"
    assert names <= reached, f"declared but never reached: {names - reached}"
