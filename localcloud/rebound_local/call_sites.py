"""Which of Rebound's own functions made an AWS call: the call site a bill attributes units to.

A call's site is the innermost frame of the ``rebound`` package outside its adapters (the store, the
queues: they serve every caller alike), named by its file under the package and its qualified name
(``engine/executor/attempt.py:Attempts._claim_and_run``). A call made by no such frame (the local
runtime's own bookkeeping) is ``OTHER``.
"""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path

import rebound

PACKAGE = str(Path(rebound.__file__).resolve().parent) + os.sep
_ADAPTERS = PACKAGE + "adapters" + os.sep
OTHER = "other"


@functools.lru_cache(maxsize=4096)
def _label(filename: str, qualname: str) -> str:
    return f"{filename[len(PACKAGE) :]}:{qualname}"


def call_site() -> str:
    """The site of the call being made on this thread (see the module's docstring)."""
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        name = code.co_filename
        if name.startswith(PACKAGE) and not name.startswith(_ADAPTERS):
            return _label(name, code.co_qualname)
        frame = frame.f_back  # type: ignore[assignment]
    return OTHER
