"""An invariant's verdict: whether it held, why, a few examples and what it counted."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

EXAMPLES = 10
"""At most this many examples go into a report."""


@dataclass
class Invariant:
    ok: bool
    detail: str
    examples: list[Any] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    """What it checked, by kind, where a scenario must show it checked something."""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"ok": self.ok, "detail": self.detail}
        if self.examples:
            out["examples"] = self.examples[:EXAMPLES]
        if self.counts:
            out["counts"] = dict(self.counts)
        return out
