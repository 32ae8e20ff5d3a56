"""docs/cost.md's tables of units by call site, one per run class, written by ``make bench`` (the
``cost`` group) from what it measured: each DynamoDB call's units go to the Rebound function that
made it (``rebound_local.call_sites``), less the idle environment's rate, per run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rebound_local.bench.common import REPO

PAGE = REPO / "docs" / "cost.md"
START = "<!-- call sites: written by make bench ONLY=cost from bench/results.json -->"
END = "<!-- end of call sites -->"
CLASSES = {
    "clean": "A clean run",
    "one_retry": "One retry",
    "dead_letter": "Dead-lettered, with a work order",
}
SHOWN = 0.005
"""Sites below this many units a run, both kinds, are left out of the table (their sum is not)."""


def call_sites(units_per_run: dict[str, float]) -> dict[str, dict[str, float]]:
    """``site -> {"write_units", "read_units"}`` from a class's units a run."""
    out: dict[str, dict[str, float]] = {}
    for kind in ("write_units", "read_units"):
        prefix = f"dynamodb.{kind}.site."
        for line, value in units_per_run.items():
            if line.startswith(prefix):
                out.setdefault(line.removeprefix(prefix), {"write_units": 0.0, "read_units": 0.0})[kind] = (
                    value
                )
    return dict(sorted(out.items(), key=lambda kv: (-kv[1]["write_units"], -kv[1]["read_units"], kv[0])))


def render(cost: dict[str, Any]) -> str:
    """One table per run class: each call site's write and read units a run, and their sum."""
    out: list[str] = []
    for name, title in CLASSES.items():
        per_run = cost["per_million_runs"][name]["units_per_run"]
        sites = call_sites(per_run)
        out += [
            f"**{title}** (`{name}`): {per_run.get('dynamodb.write_units', 0):.2f} write units and "
            f"{per_run.get('dynamodb.read_units', 0):.2f} read units a run.",
            "",
            "| call site | write units | read units |",
            "|---|---|---|",
        ]
        for site, units in sites.items():
            if abs(units["write_units"]) < SHOWN and abs(units["read_units"]) < SHOWN:
                continue
            out.append(f"| `{site}` | {units['write_units']:.2f} | {units['read_units']:.2f} |")
        out.append("")
    return "\n".join(out).rstrip("\n")


def write_page(page: Path, cost: dict[str, Any]) -> None:
    """Replace the tables between the page's markers with ``render(cost)``."""
    text = page.read_text(encoding="utf-8")
    if START not in text or END not in text:
        raise ValueError(f"{page}: the markers {START!r} and {END!r} are missing")
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    page.write_text(f"{head}{START}\n{render(cost)}\n{END}{tail}", encoding="utf-8")
