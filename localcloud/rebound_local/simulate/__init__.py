"""``rebound local simulate``: run a scenario under the virtual clock and judge it by its invariants.

1. **Start.** The stand-in, the resources and the runtime start on a ``VirtualClock`` at the
   scenario's start; the scenario's tasks are registered through ``TaskOps`` (as the CLI does).
2. **Run.** Schedule time passes until the end of the window, with the scenario's faults:
   duplicate deliveries, executor crashes at named points, throttled AWS calls.
3. **Settle.** Recurring schedules stop firing; retries, leases and redeliveries that are
   already under way get up to ``settle`` more schedule time, checked once a minute, to finish.
   Then the runtime takes no new work and serves the clock until every invocation under way
   has returned (``LocalRuntime.finish``).
4. **Judge.** Runs, work orders and audit chains are read straight from moto's tables, every
   queued message is reconciled against the message ledger, and each invariant is checked.

The report is JSON; ``ok`` is true iff every invariant held and the simulation finished. A run
that cannot finish (a worker busy off the clock, or virtual time standing still, for
``stall_wall_s`` of wall time; or invocations still running past every Lambda timeout at the
end) never hangs: its report has ``ok: false`` and ``hung`` (why, when, and each invocation still
running: function, since when, its deadline, its messages), and ``rebound local simulate`` exits 3.

The modules: ``run`` drives a scenario (the ``Simulation`` and the ``rebound local simulate``
command), ``sabotage`` breaks what a scenario's sabotage names, ``invariants`` holds the
simulator's own checks (the rest are judged by ``rebound_local.invariants``), ``report`` builds
and prints the report, and ``state`` declares what a ``Simulation`` holds for those parts.
"""

from rebound_local.simulate.invariants import UNSETTLED, _on_time
from rebound_local.simulate.report import SimulationResult, dispatch_latency
from rebound_local.simulate.run import SETTLE_STEP, Progress, Simulation, ending_with, run_simulate

__all__ = [
    "SETTLE_STEP",
    "UNSETTLED",
    "Progress",
    "Simulation",
    "SimulationResult",
    "_on_time",
    "dispatch_latency",
    "ending_with",
    "run_simulate",
]
