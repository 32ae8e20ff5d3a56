"""The bench's history file and the table docs/performance.md renders from it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rebound_local.bench import history, table
from rebound_local.bench.common import GROUPS
from rebound_local.bench.targets import TARGETS


def results(clean: float, *, at: str) -> dict[str, Any]:
    measured: dict[str, Any] = {
        "measured_at": at,
        "machine": {"cpus": 2, "load_average_before": [0.5, 0.4, 0.3]},
        "cost": {
            "per_million_runs": {
                "clean": {"dollars": clean, "dollars_provisioned": 2.0},
                "one_retry": {"dollars": 9.0},
                "dead_letter": {"dollars": 30.0},
            },
            "idle_monthly": {"total": 9.5},
            "idle_monthly_provisioned": {"total": 19.0},
        },
    }
    measured["table"] = table(measured)
    return measured


def test_the_page_shows_the_latest_row_of_each_figure_in_the_history() -> None:
    page = history.PAGE.read_text()
    rendered = history.render(history.read(history.HISTORY))
    assert f"{history.START}\n{rendered}\n{history.END}" in page, "run make bench, or render the page"


def test_every_figure_names_its_group_and_what_bounds_it() -> None:
    for target in TARGETS:
        assert target.group in GROUPS, target.figure
        assert target.bounded_by, target.figure


def test_a_run_appends_only_the_rows_its_groups_measured(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    history.append(path, history.entry(results(4.5, at="2026-11-28T10:00:00Z"), ["cost"], "abc123"))
    [line] = history.read(path)
    assert line["groups"] == ["cost"] and line["commit"] == "abc123"
    figures = {row["figure"]: row for row in line["rows"]}
    assert {row["group"] for row in line["rows"]} == {"cost"}
    assert figures["$ per 1M clean runs (all AWS services, no target compute)"]["measured"] == "4.50"
    assert figures["$ per 1M clean runs (all AWS services, no target compute)"]["result"] == "FAIL"
    assert not any(f.startswith("simulate day") for f in figures), "a group that did not run adds nothing"


def test_the_table_takes_each_figure_from_its_latest_run(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    history.append(path, history.entry(results(4.5, at="2026-11-28T10:00:00Z"), ["cost"], "abc"))
    history.append(path, history.entry(results(3.9, at="2026-11-28T11:00:00Z"), ["cost"], "def"))
    rendered = history.render(history.read(path))
    clean = next(r for r in rendered.splitlines() if r.startswith("| $ per 1M clean runs (all"))
    assert "| 3.90 | pass | 2026-11-28 11:00 UTC, load 0.5, `def` | `make bench ONLY=cost` |" in clean
    day = next(r for r in rendered.splitlines() if r.startswith("| simulate day-100-tasks"))
    assert "| not measured yet |" in day
    assert len(history.read(path)) == 2, "history is appended, never rewritten"


def test_the_page_is_rewritten_between_its_markers_only(tmp_path: Path) -> None:
    page = tmp_path / "performance.md"
    page.write_text(f"# Title\n\nbefore\n{history.START}\nold table\n{history.END}\nafter\n")
    line = history.entry(results(3.9, at="2026-11-28T11:00:00Z"), ["cost"], None)
    history.write_page(page, [line])
    text = page.read_text()
    assert text.startswith("# Title\n\nbefore\n") and text.endswith(f"{history.END}\nafter\n")
    assert "old table" not in text and "| 3.90 | pass |" in text


def test_a_page_without_markers_or_a_broken_history_line_is_named(tmp_path: Path) -> None:
    page = tmp_path / "performance.md"
    page.write_text("# no markers\n")
    with pytest.raises(ValueError, match="markers"):
        history.write_page(page, [])
    broken = tmp_path / "history.jsonl"
    broken.write_text(json.dumps({"rows": []}) + "\n{not json\n")
    with pytest.raises(ValueError, match=r"history.jsonl:2: not a JSON line"):
        history.read(broken)
