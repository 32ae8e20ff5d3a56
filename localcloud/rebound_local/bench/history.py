"""The bench's history and today's table.

Each ``make bench`` (or ``--only GROUP``) appends one line to ``bench/history.jsonl``: when, on
which commit, on what machine (its load average), which groups ran, and the rows those groups
measured. ``docs/performance.md`` shows, between its two markers, the latest measured row of each
figure, rendered from that file (``render``); a test holds the page to the file, so the page's
figures are always ones the file records.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rebound_local.bench.common import REPO, write_between
from rebound_local.bench.targets import TARGETS

HISTORY = REPO / "bench" / "history.jsonl"
PAGE = REPO / "docs" / "performance.md"
START = "<!-- bench table: written by make bench from bench/history.jsonl -->"
END = "<!-- end of bench table -->"
NOT_RUN = "not run"


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


def commit_of(repo: Path = REPO) -> str | None:
    """The commit measured, with ``+`` when the tree had changes; None outside a git checkout."""
    try:
        head = _git(repo, "rev-parse", "--short=12", "HEAD").strip()
        dirty = _git(repo, "status", "--porcelain", "--untracked-files=no").strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return f"{head}+" if dirty else head


def entry(results: dict[str, Any], groups: Iterable[str], commit: str | None) -> dict[str, Any]:
    """The history line of one bench: the rows of the groups that ran, as measured."""
    ran = set(groups)
    by_figure = {row["figure"]: row for row in results["table"]}
    rows = [
        {**by_figure[t.figure], "group": t.group}
        for t in TARGETS
        if t.group in ran and by_figure.get(t.figure, {}).get("measured", NOT_RUN) != NOT_RUN
    ]
    return {
        "measured_at": results["measured_at"],
        "commit": commit,
        "machine": results["machine"],
        "groups": sorted(ran),
        "rows": rows,
    }


def append(path: Path, line: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(line, sort_keys=True) + "\n")


def read(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    lines = []
    for number, text in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not text.strip():
            continue
        try:
            lines.append(json.loads(text))
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{number}: not a JSON line ({exc.msg})") from exc
    return lines


def latest(history: list[dict[str, Any]]) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """Each figure's latest measured row, with the history line it came from."""
    found: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
    for line in history:
        for row in line["rows"]:
            found[row["figure"]] = (row, line)
    return found


def render(history: list[dict[str, Any]]) -> str:
    """Today's table: one row per figure, its target, the latest value, and how to measure it."""
    now = latest(history)
    out = [
        "| figure | target | today | result | measured | reproduce | bounded by |",
        "|---|---|---|---|---|---|---|",
    ]
    for t in TARGETS:
        row, line = now.get(t.figure, ({}, {}))
        when = line.get("measured_at", "")[:16].replace("T", " ")
        load = line.get("machine", {}).get("load_average_before")
        where = f"{when} UTC, load {load[0]:g}" if when and load else when or "-"
        if line.get("commit"):
            where += f", `{line['commit']}`"
        out.append(
            f"| {t.figure} | {t.target} | {row.get('measured', 'not measured yet')} | "
            f"{row.get('result', '-')} | {where} | `make bench ONLY={t.group}` | {t.bounded_by} |"
        )
    return "\n".join(out)


def write_page(page: Path, history: list[dict[str, Any]]) -> None:
    """Replace the table between the page's markers with ``render(history)``."""
    write_between(page, START, END, render(history))
