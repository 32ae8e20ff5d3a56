"""Files the local cloud ships inside its package: the demo's tasks and workstream
(``config/demo``, installed as ``rebound_local/_demo``; see ``setup.py``)."""

from __future__ import annotations

import importlib.resources
from pathlib import Path


def demo_file(name: str) -> Path:
    """``config/demo/<name>``: the installed package's copy, found with ``importlib.resources``;
    in a checkout (an editable install), the checkout's."""
    shipped = importlib.resources.files("rebound_local").joinpath("_demo", name)
    if isinstance(shipped, Path) and shipped.is_file():
        return shipped
    return Path(__file__).resolve().parents[2] / "config" / "demo" / name
