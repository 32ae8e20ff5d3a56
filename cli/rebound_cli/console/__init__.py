"""The ops console: a small web app for on-call operators, served on 127.0.0.1 by ``rebound console``
and ``rebound local up``. The server (``server``) serves the static assets shipped in this package and
the operations API in-process, with the operator's own AWS identity as the caller."""

from __future__ import annotations

from rebound_cli.console.server import ConsoleServer

__all__ = ["ConsoleServer"]
