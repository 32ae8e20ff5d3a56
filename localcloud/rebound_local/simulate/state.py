"""What a ``Simulation`` holds while it runs, declared once for the parts it is made of.

``run.Simulation.__init__`` sets every attribute; ``sabotage``, ``invariants`` and ``report`` read
and add to them.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from rebound_local.instrument import MessageLedger
from rebound_local.invariants import Fire
from rebound_local.live_carriers import LiveCarriers
from rebound_local.scenario import LoadedScenario, Scenario


class SimulationState:
    """The attributes ``Simulation`` sets, for its mixins (nothing here runs)."""

    loaded: LoadedScenario
    scenario: Scenario
    seed: int
    transport: str
    ledger: MessageLedger
    live: LiveCarriers
    fires: list[Fire]
    workstream_fires: list[Fire]
    dropped: list[dict[str, str]]
    tampered: list[str]
    sabotaged: dict[str, list[str]]
    operations: list[dict[str, Any]]
    window_start: tuple[datetime, dict[str, float], int] | None
    _drops_left: int
