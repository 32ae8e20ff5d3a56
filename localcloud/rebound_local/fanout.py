"""``LocalFanout``: the engine's ``Fanout`` port for the local runtime, correct under a ``VirtualClock``.

The executor runs the messages of one batch at once through ``deps.fanout.map``; each call may
sleep on the clock (a simulated target that takes 30 s). Plain threads would break the virtual
clock: it moves on only when no worker is busy, and a thread it does not know about is not counted.
So each child thread:

- is counted busy from before it starts until it returns, and marked a worker (so it may spend
  clock time, as the runtime's own workers do);
- works for the parent's invocation (``invocations.Lane``): if the invocation is abandoned (its
  timeout, or a ``SimulatedCrash`` in any thread of it, this child included), the child can no
  longer touch AWS and is woken from any sleep to raise ``SimulatedCrash``;
- with interleaving on, yields once before it starts, so children take turns in an order the seed
  decides.

The children run on a pool of reused daemon threads (``workers.WorkerPool``: a child always gets a
thread at once, a new one when none is free), not a thread started per message: a simulated day
runs tens of thousands of batches. ``close`` stops the pool's threads.

The parent hands its own busy count over while it waits and takes it back from the last child to
finish, so the clock cannot move between the children finishing and the parent going on. Results
come back in the order of the items; if any call raised, ``map`` waits for all of them and then
raises the first exception in item order (``BaseException`` included), as ``ThreadFanout`` does.
On a ``ScaledClock`` the counting is a no-op and the threads are plain threads.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from rebound_local.clock import ScaledClock, VirtualClock
from rebound_local.invocations import (
    CallGate,
    Lane,
    SimulatedCrash,
    current_lane,
    in_worker,
    mark_worker,
    working_for,
)
from rebound_local.workers import WorkerPool

T = TypeVar("T")
R = TypeVar("R")


class LocalFanout:
    def __init__(self, clock: VirtualClock | ScaledClock, gate: CallGate | None = None) -> None:
        self.clock = clock
        self.gate = gate
        self._pool = WorkerPool("fanout")

    def close(self) -> list[str]:
        """Stop the pool's threads; the names of those still busy after a few seconds."""
        return self._pool.shutdown(timeout=5.0)

    def map(self, fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
        items = list(items)
        if len(items) <= 1:
            return [fn(item) for item in items]
        clock = self.clock
        virtual = isinstance(clock, VirtualClock)
        worker = in_worker()
        handover = virtual and worker  # the parent is counted busy: it hands its count to the children
        parent = current_lane()
        lanes: list[Lane | None] = [parent.child() if parent is not None else None for _ in items]
        results: list[Any] = [None] * len(items)
        errors: list[BaseException | None] = [None] * len(items)
        remaining = [len(items)]
        lock = threading.Lock()
        done = threading.Event()

        def body(index: int) -> None:
            with working_for(lanes[index]):
                if self.gate is not None:
                    self.gate.start()
                results[index] = fn(items[index])

        def child(index: int, context: contextvars.Context) -> None:
            mark_worker(worker)
            try:
                context.run(body, index)
            except BaseException as exc:
                errors[index] = exc
                lane = lanes[index]
                if isinstance(exc, SimulatedCrash) and lane is not None:
                    lane.invocation.abandon("crash")  # one crashing thread takes the invocation with it
            finally:
                mark_worker(False)
                with lock:
                    remaining[0] -= 1
                    last = remaining[0] == 0
                if last:
                    done.set()  # with a handover, this child's busy count becomes the parent's
                if virtual and not (last and handover):
                    clock.end()

        for _ in items:
            clock.begin()
        for index in range(len(items)):
            self._pool.submit(child, index, contextvars.copy_context())
        if handover:
            clock.end()
        done.wait()
        for error in errors:
            if error is not None:
                raise error
        return results
