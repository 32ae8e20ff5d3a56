"""Work a report can hand to a second core: computed in a forked child while the process goes on.

The simulator's process is the local cloud, under one interpreter lock: its report's checks run
one after another on one core of two. A check that only reads what the process already holds
(the audit chains, in moto's tables) can run in a child made with ``fork``: the child sees the
parent's memory as it was at the fork, computes, sends the answer back through a pipe and exits;
the parent meanwhile judges the rest. Checking every audit chain of a simulated day is about a third of its
report (docs/performance.md).

Whatever goes wrong in the child (no ``fork`` on this platform, an error, no answer within the
time allowed) costs only time: ``result`` then computes the answer here, so it is the same
answer, or the same error, as without a child (``tests/unit/test_forked.py``). The child runs
nothing but the function, and waits on no lock another thread held at the fork (the runtime has
finished when a report is made, and the report's child takes the local cloud's lock only if it is
free); it leaves with ``os._exit``, running no exit handlers and flushing none of the parent's
buffers. Used as a context manager, it stops and reaps a child whose answer was never asked
for, so a report that raised leaves no child behind.
"""

from __future__ import annotations

import os
import pickle
import select
import time
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")

TIMEOUT_S = 300.0
"""How long ``result`` waits for the child's answer before computing it itself."""


class Forked(Generic[T]):
    """``fn()`` in a forked child; ``here`` (by default ``fn`` itself) answers in this process
    when the child does not: the same question, asked of what this process holds by then."""

    def __init__(
        self, fn: Callable[[], T], here: Callable[[], T] | None = None, timeout_s: float = TIMEOUT_S
    ) -> None:
        self._fn = here or fn
        self._timeout_s = timeout_s
        self._pid: int | None = None
        self._read = -1
        if not hasattr(os, "fork"):
            return
        read, write = os.pipe()
        try:
            pid = os.fork()
        except OSError:
            os.close(read)
            os.close(write)
            return
        if pid == 0:  # the child: compute, answer, leave
            os.close(read)
            status = 1
            try:
                answer = pickle.dumps(fn(), protocol=pickle.HIGHEST_PROTOCOL)
                with os.fdopen(write, "wb") as out:
                    out.write(answer)
                status = 0
            finally:
                os._exit(status)
        os.close(write)
        self._pid, self._read = pid, read

    @property
    def forked(self) -> bool:
        """Whether a child is computing it."""
        return self._pid is not None

    @property
    def pid(self) -> int | None:
        """The child's process id, until its answer is collected or it is stopped."""
        return self._pid

    def __enter__(self) -> Forked[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop and reap a child whose answer nobody asked for (the parent raised before it did)."""
        if self._pid is None:
            return
        pid, self._pid = self._pid, None
        os.close(self._read)
        os.kill(pid, 9)  # an unreaped child is there to signal, even once it has exited
        os.waitpid(pid, 0)

    def result(self) -> T:
        """The child's answer; computed here if the child gave none."""
        if self._pid is None:
            return self._fn()
        answer = self._collect()
        if answer is None:
            return self._fn()
        value: T = pickle.loads(answer)
        return value

    def _collect(self) -> bytes | None:
        assert self._pid is not None
        pid, self._pid = self._pid, None
        chunks: list[bytes] = []
        deadline = time.monotonic() + self._timeout_s
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([self._read], [], [], left)[0]:
                    os.kill(pid, 9)  # no answer in time: stop it, and answer here
                    os.waitpid(pid, 0)
                    return None
                chunk = os.read(self._read, 1 << 20)
                if not chunk:
                    break
                chunks.append(chunk)
        finally:
            os.close(self._read)
        _, status = os.waitpid(pid, 0)
        return b"".join(chunks) if status == 0 else None
