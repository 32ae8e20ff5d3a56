"""What every bench group shares: where the repository and its scenarios are, the groups."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
SCENARIOS = {
    "day": REPO / "scenarios" / "day-100-tasks.yaml",
    "stress": REPO / "scenarios" / "stress-10k.yaml",
    "hostile": REPO / "scenarios" / "hostile-day.yaml",
    "conflicts": REPO / "scenarios" / "conflicts-day.yaml",
    "races": REPO / "scenarios" / "workstreams-races.yaml",
}
COST_SCENARIOS = {
    "idle": REPO / "scenarios" / "cost-idle.yaml",
    "clean": REPO / "scenarios" / "cost-clean.yaml",
    "clean_low_volume": REPO / "scenarios" / "cost-clean-low-volume.yaml",
    "one_retry": REPO / "scenarios" / "cost-one-retry.yaml",
    "dead_letter": REPO / "scenarios" / "cost-dead-letter.yaml",
}
OUTAGE_SCENARIO = REPO / "scenarios" / "target-outage.yaml"
GROUPS = (
    "cost",
    "day",
    "stress",
    "hostile",
    "races",
    "outage",
    "ops",
    "verify",
    "imports",
    "console",
    "conflicts",
)
APPLY_TARGET_TASKS = 10_000


def write_between(page: Path, start: str, end: str, body: str) -> None:
    """Replace what stands between a page's two marker lines with ``body``; a page without both
    markers is refused, naming them."""
    text = page.read_text(encoding="utf-8")
    if start not in text or end not in text:
        raise ValueError(f"{page}: the markers {start!r} and {end!r} are missing")
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    page.write_text(f"{head}{start}\n{body}\n{end}{tail}", encoding="utf-8")
