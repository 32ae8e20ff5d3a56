"""Patch 2, atomicity: one re-entrant lock around every moto action.

AWS applies each conditional write atomically; moto's threaded server does not lock, so two
concurrent conditional puts could both succeed. One re-entrant lock (``LOCK``) around every moto
action restores linearizable reads and writes (long-polling receives excepted). The local cloud
holds the same lock wherever it reads or edits moto's state directly.
"""

from __future__ import annotations

import threading
from typing import Any

LOCK = threading.RLock()


def _patch_lock() -> None:
    from moto.core.responses import BaseResponse

    original = BaseResponse.call_action

    def call_action(self: Any) -> Any:
        if _is_long_poll(self):
            return original(self)
        with LOCK:
            return original(self)

    BaseResponse.call_action = call_action  # type: ignore[method-assign]


def _is_long_poll(response: Any) -> bool:
    try:
        if response._get_action() != "ReceiveMessage":
            return False
        wait = response._get_param("WaitTimeSeconds")
    except Exception:
        return False
    return bool(wait) and int(wait) > 0
