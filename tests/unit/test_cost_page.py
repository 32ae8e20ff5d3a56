"""docs/cost.md's tables of units by call site are what the latest ``make bench ONLY=cost``
recorded in bench/history.jsonl (``rebound_local.bench.cost_page``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rebound_local.bench import cost_page, history


def test_the_page_shows_the_call_sites_the_history_records() -> None:
    measured = cost_page.latest(history.read(history.HISTORY))
    assert measured is not None, "no bench line with call sites: run make bench ONLY=cost"
    text = cost_page.PAGE.read_text()
    shown = text.split(cost_page.START, 1)[1].split(cost_page.END, 1)[0].strip()
    assert shown == cost_page.render(measured)
    for name in cost_page.CLASSES:  # every class was measured with its sites
        assert measured[name]["sites"], name


def test_call_sites_gather_both_kinds_of_unit_by_site_and_render_most_writes_first() -> None:
    units = {
        "dynamodb.write_units": 3.0,
        "dynamodb.write_units.site.engine/a.py:f": 1.0,
        "dynamodb.write_units.site.engine/b.py:g": 2.0,
        "dynamodb.read_units.site.engine/a.py:f": 0.5,
        "dynamodb.read_units.site.ops/c.py:h": 0.25,
    }
    assert cost_page.call_sites(units) == {
        "engine/b.py:g": {"write_units": 2.0, "read_units": 0.0},
        "engine/a.py:f": {"write_units": 1.0, "read_units": 0.5},
        "ops/c.py:h": {"write_units": 0.0, "read_units": 0.25},
    }
    measured = {"write_units": 3.0, "read_units": 0.75, "sites": cost_page.call_sites(units)}
    rows = cost_page.render(dict.fromkeys(cost_page.CLASSES, measured)).splitlines()
    first = [line.split("`")[1] for line in rows if line.startswith("| `")][:3]
    assert first == ["engine/b.py:g", "engine/a.py:f", "ops/c.py:h"]


def test_the_latest_line_with_call_sites_is_the_one_shown() -> None:
    older = {"call_sites": {"clean": "older"}}
    newer = {"call_sites": {"clean": "newer"}}
    assert cost_page.latest([older, newer, {"rows": []}]) == {"clean": "newer"}
    assert cost_page.latest([{"rows": []}]) is None


def test_a_page_without_the_markers_is_refused_naming_them(tmp_path: Path) -> None:
    page = tmp_path / "cost.md"
    page.write_text("# cost\n")
    measured = {name: {"write_units": 1.0, "read_units": 1.0, "sites": {}} for name in cost_page.CLASSES}
    with pytest.raises(ValueError, match="markers"):
        cost_page.write_page(page, measured)
