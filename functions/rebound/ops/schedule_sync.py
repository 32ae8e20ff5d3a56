"""What a bulk ``tasks apply`` knows of Scheduler before it writes: a listing, and what it verified.

An apply of many tasks used to read every schedule (``GetSchedule``, one request each) to find
the few that differ. Now it lists the group once (``ListSchedules``, one request per 100
schedules: each schedule's ``LastModificationDate``, state and target ARN) and reads, in batches
of 100, the control records ``schedule-sync#<name>`` in which every earlier sync left what it
verified: the fingerprint of the request that writes the schedule and the schedule's
``LastModificationDate`` when it held exactly that. Scheduler moves a schedule's
``LastModificationDate`` on every change, so a schedule listed at the date its record holds, in
the state and with the target wanted, and wanted with the same fingerprint, needs no request at
all; every other one (changed by hand, deleted, disabled, pointed elsewhere, or never recorded)
is read and repaired as before (``Schedules.sync_recurring``).

A small apply (``LIST_ABOVE`` schedules or fewer) makes no listing: it reads each schedule, which
costs fewer requests than listing a large group.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from rebound.engine.ports import Listed, Store, Synced

SYNC_PREFIX = "schedule-sync#"
LIST_ABOVE = 25
"""Applies of more schedules than this list the group instead of reading each schedule."""


@dataclass
class SyncView:
    """The listing (None: none made) and the verified records of the schedules an apply writes."""

    listing: dict[str, Listed] | None = None
    known: dict[str, Synced] = field(default_factory=dict)

    @classmethod
    def read(
        cls,
        store: Store,
        names: Iterable[str],
        listing: Callable[[str], dict[str, Listed]],
    ) -> SyncView:
        """``listing(prefix)`` lists the group's schedules under ``prefix`` (the names' common one)."""
        wanted = list(dict.fromkeys(names))
        if len(wanted) <= LIST_ABOVE:
            return cls()
        listed = listing(_common_prefix(wanted))
        records = store.get_keys([SYNC_PREFIX + name for name in wanted if name in listed])
        known = {
            key.removeprefix(SYNC_PREFIX): Synced(str(data["fingerprint"]), str(data["modified"]))
            for key, data in records.items()
            if "fingerprint" in data and "modified" in data
        }
        return cls(listed, known)

    def remember(self, store: Store, name: str, synced: Synced | None) -> None:
        """Keep what a sync verified (nothing is written when it is what the record holds). An
        unverified sync leaves the record alone: the schedule's date has moved past it."""
        if synced is None:
            self.known.pop(name, None)
        elif self.known.get(name) != synced:
            record = {"fingerprint": synced.fingerprint, "modified": synced.modified}
            store.put_key(SYNC_PREFIX + name, record)
            self.known[name] = synced

    @staticmethod
    def forget(store: Store, name: str) -> None:
        """The schedule was deleted: its record goes too."""
        store.release_key(SYNC_PREFIX + name)


def _common_prefix(names: list[str]) -> str:
    """The longest text every name starts with."""
    first, last = min(names), max(names)
    n = 0
    while n < min(len(first), len(last)) and first[n] == last[n]:
        n += 1
    return first[:n]
