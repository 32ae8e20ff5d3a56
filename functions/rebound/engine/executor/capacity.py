"""Capacity reservation before an attempt (``capacity_reserve:`` on a task, or its tenant's).

Before each attempt is claimed, the executor asks the capacity service named by the task (or, if
it names none, by its tenant): ``POST {url}/ops/capacity/reserve`` with the run, the attempt, its
idempotency key (``run#attempt``: asking again for the same attempt is the same reservation) and
the task's ``needs``, sent as the http target sends (``rebound.adapters.targets.http``).

- a 2xx answer grants it, unless its JSON says ``"reserved": false`` (a refusal, with its
  ``reason``); the answer's ``reservation_id`` goes into the claim's audit record;
- 409, 403 and other terminal answers are a refusal; 5xx, 408, 429, no answer in
  ``RESERVE_TIMEOUT_S``, or no connection are the service being unavailable.

Either way the run is not started and spends no attempt: it waits, as a run waits for a quota
(``reason``: ``capacity_refused`` or ``capacity_unavailable``), is asked again at each poll, and
is dead-lettered with ``WAIT_EXHAUSTED`` only past its policy's ``max_wait``. Nothing is lost.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from rebound.domain import tracing
from rebound.domain.run import Run
from rebound.domain.target_specs import CapacityReserve
from rebound.domain.task import Task, TenantSettings
from rebound.engine.ports.targets import Invocation, Targets

RESERVE_TIMEOUT_S = 10.0
REFUSED = "capacity_refused"
UNAVAILABLE = "capacity_unavailable"


@dataclass(frozen=True)
class Reservation:
    granted: bool
    reason: str | None = None
    """``capacity_refused`` or ``capacity_unavailable`` when not granted."""
    detail: str = ""
    reservation_id: str | None = None


def reservation_spec(task: Task, tenant: TenantSettings | None) -> CapacityReserve | None:
    """The capacity service ``task``'s runs ask: its own, else its tenant's, else none."""
    return task.capacity_reserve or (tenant.capacity_reserve if tenant is not None else None)


def reserve(targets: Targets, spec: CapacityReserve, run: Run, attempt: int, now: datetime) -> Reservation:
    """Ask ``spec``'s service for ``run``'s ``attempt`` (see the module's docstring)."""
    call = Invocation(
        run_id=run.run_id,
        task_id=run.task_id,
        tenant=run.tenant,
        attempt=attempt,
        scheduled_for=run.scheduled_for,
        payload=spec.needs,
        deadline=now + timedelta(seconds=RESERVE_TIMEOUT_S),
        trace_id=tracing.trace_id(run.run_id, run.scheduled_for),
    )
    outcome = targets.invoke(spec, call)
    if outcome.ok:
        output = outcome.output or {}
        if output.get("reserved") is False:
            return Reservation(False, REFUSED, str(output.get("reason") or "refused")[:200])
        found = output.get("reservation_id")
        return Reservation(True, reservation_id=str(found)[:128] if found is not None else None)
    detail = f"{outcome.error_code}: {outcome.message}"[:200]
    return Reservation(False, UNAVAILABLE if outcome.retryable else REFUSED, detail)
