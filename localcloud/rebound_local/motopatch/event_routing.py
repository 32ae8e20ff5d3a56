"""Patch 9, event routing: a DISABLED rule matches nothing, and rules that cannot match are set aside.

AWS semantics: a DISABLED rule matches nothing (moto routes to it anyway); pausing an
event-triggered task disables its rule. Speed: moto builds each event again for every rule on the
bus before matching; rules whose plain ``detail-type``/``source`` values none of the events has are
set aside for the call, and moto matches every other rule as before.
"""

from __future__ import annotations

from typing import Any


def _rule_may_match(rule: Any, detail_types: set[str], sources: set[str]) -> bool:
    """False only when the rule's pattern lists plain detail-types or sources none of the events has."""
    pattern = rule.event_pattern.get_pattern() or {}
    for key, present in (("detail-type", detail_types), ("source", sources)):
        wanted = pattern.get(key)
        plain = isinstance(wanted, list) and bool(wanted) and all(isinstance(w, str) for w in wanted)
        if plain and not present.intersection(wanted or ()):
            return False
    return True


def _patch_event_routing() -> None:
    """Two changes to moto's event routing:

    - AWS semantics: a DISABLED rule matches nothing (moto routes to it anyway). Pausing an
      event-triggered task disables its rule.
    - Speed: moto builds each event again (a deep copy and a JSON parse) for every rule on the
      bus, and only then matches. Rules that list plain ``detail-type``/``source`` values none of
      the events have are set aside for the call; every other rule is matched by moto as before."""
    from collections import OrderedDict

    from moto.events.models import EventsBackend

    original = EventsBackend.put_events

    def put_events(self: Any, events: list[dict[str, Any]]) -> Any:
        detail_types = {str(e.get("DetailType")) for e in events}
        sources = {str(e.get("Source")) for e in events}
        swapped = []
        for name in {self._normalize_event_bus_arn(e.get("EventBusName")) for e in events}:
            try:
                bus = self.describe_event_bus(name)
            except Exception:
                continue  # moto reports the unknown bus itself
            keep = OrderedDict(
                (k, r)
                for k, r in bus.rules.items()
                if r.state != "DISABLED" and _rule_may_match(r, detail_types, sources)
            )
            swapped.append((bus, bus.rules))
            bus.rules = keep
        try:
            return original(self, events)
        finally:
            for bus, rules in swapped:
                bus.rules = rules

    EventsBackend.put_events = put_events  # type: ignore[method-assign]
