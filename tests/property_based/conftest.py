"""Hypothesis profiles.

``make test`` (and CI) loads ``ci``: the examples are derived from each test's name, so a run is
reproducible and a red CI run is red again on a laptop. ``make fuzz`` loads ``fuzz``: fresh random
examples on every round, for finding new failures; each one it finds becomes an ``@example`` on
its test once it is fixed, so ``make test`` keeps checking it.
"""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, database=None)
settings.register_profile("fuzz", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
