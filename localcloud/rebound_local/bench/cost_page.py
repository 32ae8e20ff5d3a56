"""docs/cost.md's tables of units by call site, one per run class, written by ``make bench`` (the
``cost`` group) from what it measured: each DynamoDB call's units go to the Rebound function that
made it (``rebound_local.call_sites``), less the idle environment's rate, per run. The figures are
kept in the bench's history line (``call_sites``), and the page is rendered from the latest line
that has them, so a test holds the page to the history file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rebound_local.bench.common import REPO, write_between

PAGE = REPO / "docs" / "cost.md"
START = "<!-- call sites: written by make bench ONLY=cost from bench/history.jsonl -->"
END = "<!-- end of call sites -->"
CLASSES = {
    "clean": "A clean run",
    "one_retry": "One retry",
    "dead_letter": "Dead-lettered, with a work order",
}
SHOWN = 0.005
"""Sites below this many units a run, both kinds, are left out of the table (the totals keep them)."""


def call_sites(units_per_run: dict[str, float]) -> dict[str, dict[str, float]]:
    """``site -> {"write_units", "read_units"}`` from a class's units a run (``render`` orders them)."""
    out: dict[str, dict[str, float]] = {}
    for kind in ("write_units", "read_units"):
        prefix = f"dynamodb.{kind}.site."
        for line, value in units_per_run.items():
            if line.startswith(prefix):
                site = out.setdefault(line.removeprefix(prefix), {"write_units": 0.0, "read_units": 0.0})
                site[kind] = value
    return out


def _most_writes_first(kv: tuple[str, dict[str, float]]) -> tuple[float, float, str]:
    return (-kv[1]["write_units"], -kv[1]["read_units"], kv[0])


def figures(cost: dict[str, Any]) -> dict[str, Any]:
    """What the history keeps of a cost measurement: each class's totals and its sites."""
    out: dict[str, Any] = {}
    for name in CLASSES:
        per_run = cost["per_million_runs"][name]["units_per_run"]
        out[name] = {
            "write_units": per_run.get("dynamodb.write_units", 0.0),
            "read_units": per_run.get("dynamodb.read_units", 0.0),
            "sites": call_sites(per_run),
        }
    return out


def latest(history: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The call sites of the latest history line that has them."""
    found = [line["call_sites"] for line in history if line.get("call_sites")]
    return found[-1] if found else None


def render(by_class: dict[str, Any]) -> str:
    """One table per run class: each call site's write and read units a run."""
    out: list[str] = []
    for name, title in CLASSES.items():
        measured = by_class[name]
        out += [
            f"**{title}** (`{name}`): {measured['write_units']:.2f} write units and "
            f"{measured['read_units']:.2f} read units a run.",
            "",
            "| call site | write units | read units |",
            "|---|---|---|",
        ]
        for site, units in sorted(measured["sites"].items(), key=_most_writes_first):
            if abs(units["write_units"]) < SHOWN and abs(units["read_units"]) < SHOWN:
                continue
            out.append(f"| `{site}` | {units['write_units']:.2f} | {units['read_units']:.2f} |")
        out.append("")
    return "\n".join(out).rstrip("\n")


def write_page(page: Path, by_class: dict[str, Any]) -> None:
    """Replace the tables between the page's markers with ``render(by_class)``."""
    write_between(page, START, END, render(by_class))
