"""How a pre-flight's warnings scored against the collisions a simulation recorded."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from rebound.domain.prediction.preflight import SHOWN_RUNS, PreflightWarning


@dataclass(frozen=True)
class Collision:
    """A run that met a busy slot in a simulation: it waited, was skipped or cancelled for it."""

    run_id: str
    reason: str


@dataclass(frozen=True)
class HitRate:
    collisions: int
    predicted: int
    warnings: int
    warnings_that_came_true: int
    missed: tuple[str, ...]

    @property
    def rate(self) -> float | None:
        """Percent of collisions a warning named the run of; None without a collision."""
        return None if not self.collisions else round(100.0 * self.predicted / self.collisions, 2)

    def as_dict(self) -> dict[str, Any]:
        return {
            "collisions": self.collisions,
            "predicted": self.predicted,
            "hit_rate_pct": self.rate,
            "warnings": self.warnings,
            "warnings_that_came_true": self.warnings_that_came_true,
            "unpredicted_runs": list(self.missed[:SHOWN_RUNS]),
        }


def hit_rate(warnings: Iterable[PreflightWarning], collisions: Iterable[Collision]) -> HitRate:
    """Collisions whose run a conflict warning named, over all collisions; and how many warnings
    named at least one run that collided."""
    judged = [w for w in warnings if w.kind != "catch_up_storm"]
    named = {run for w in judged for run in w.runs}
    happened = list({c.run_id: c for c in collisions}.values())
    hit = [c for c in happened if c.run_id in named]
    collided = {c.run_id for c in happened}
    true = sum(1 for w in judged if collided.intersection(w.runs))
    missed = tuple(sorted(c.run_id for c in happened if c.run_id not in named))
    return HitRate(len(happened), len(hit), len(judged), true, missed)
