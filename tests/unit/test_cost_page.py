"""docs/cost.md's tables of units by call site are what the last ``make bench ONLY=cost`` measured
(``rebound_local.bench.cost_page``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rebound_local.bench import cost_page
from rebound_local.bench.common import REPO

RESULTS = REPO / "bench" / "results.json"


def test_the_page_shows_the_call_sites_bench_results_records() -> None:
    cost = json.loads(RESULTS.read_text())["cost"]
    text = cost_page.PAGE.read_text()
    shown = text.split(cost_page.START, 1)[1].split(cost_page.END, 1)[0].strip()
    assert shown == cost_page.render(cost)
    for name in cost_page.CLASSES:  # every class was measured with its sites
        assert cost_page.call_sites(cost["per_million_runs"][name]["units_per_run"]), name


def test_call_sites_gather_both_kinds_of_unit_by_site_most_writes_first() -> None:
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


def test_a_page_without_the_markers_is_refused_naming_them(tmp_path: Path) -> None:
    page = tmp_path / "cost.md"
    page.write_text("# cost\n")
    with pytest.raises(ValueError, match="markers"):
        cost_page.write_page(page, {"per_million_runs": {}})
