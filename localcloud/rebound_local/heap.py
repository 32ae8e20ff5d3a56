"""The local cloud's stored state kept out of the cyclic garbage collector's way.

moto keeps every table's items as Python objects in the local cloud's process: with 10,000 runs
and their chains that is hundreds of thousands of tracked objects, and every full collection walks
them all. Full collections are set off by allocating, and answering a scan allocates for every
item it returns, so a large read paid for walking the whole store again and again: with the
collector walking them, the local cloud spent 1.43 CPU-seconds answering
``rebound audit verify --all`` over 10,000 chains, 1.04 with them frozen (docs/performance.md).

``HeapKeeper`` collects and then freezes (``gc.freeze``) once a period, in a thread of its own:
whatever survived a collection (the stored items, mostly) moves to the permanent generation,
which collections skip; what is made after it is collected as usual until the next period. A
frozen object that later becomes part of a reference cycle and is dropped is not collected (plain
reference counting still frees everything else): the local cloud is a development process, and
``stop`` unfreezes.

Only processes that are the local cloud start one: ``rebound local up``, the verify bench's local
cloud, and a simulation while it runs (``Simulation.run``, whose process holds the local cloud
too: a simulated day spent 6.3 CPU-seconds in the collector without it, 2.8 with it,
docs/performance.md).

While it runs it also raises the collector's thresholds (``THRESHOLDS``). At CPython's defaults a
young collection runs every 700 net allocations, and a simulation allocates short-lived objects
(requests, items, records) by the million, which reference counting frees anyway; between two
freezes, collecting less often is enough. In the first six hours of ``day-100-tasks`` the
collector's time fell from 1.3 to 0.6 CPU-seconds and the whole run's from 15.7 to 14.6
(docs/performance.md). ``stop`` puts the thresholds back.
"""

from __future__ import annotations

import gc
import threading

PERIOD_S = 1.0
"""Seconds between two collect-and-freeze steps."""

THRESHOLDS = (50_000, 20, 100)
"""``gc.set_threshold`` while a keeper runs: a young collection every 50,000 allocations, an older
one every 20 young and a full one every 100 older (CPython's defaults are 700, 10, 10)."""


class HeapKeeper:
    def __init__(self, period_s: float = PERIOD_S) -> None:
        self.period_s = period_s
        self.freezes = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._thresholds: tuple[int, int, int] | None = None

    def start(self) -> HeapKeeper:
        self._thresholds = gc.get_threshold()
        gc.set_threshold(*THRESHOLDS)
        self.keep()
        self._thread = threading.Thread(target=self._run, name="heap-keeper", daemon=True)
        self._thread.start()
        return self

    def keep(self) -> None:
        """Collect, then freeze what survived."""
        gc.collect()
        gc.freeze()
        self.freezes += 1

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        gc.unfreeze()
        if self._thresholds is not None:
            gc.set_threshold(*self._thresholds)
            self._thresholds = None

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            self.keep()
