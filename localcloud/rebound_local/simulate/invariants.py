"""The simulator's own invariants: what only the run itself can judge.

``rebound_local.invariants`` judges the tables (``World``/``judge``); here are the checks that need
the message ledger and moto's queues (``no_message_lost``), the copies of dead-lettered messages
the judge reads (``_dlq_copies``) and the scenario's expected on-time rate (``dispatch_on_time``).
"""

from __future__ import annotations

from typing import Any

from rebound_local import invariants as inv
from rebound_local import motopatch, observe
from rebound_local.invariants import Invariant
from rebound_local.simulate.state import SimulationState
from rebound_local.stack import LocalStack

UNSETTLED = inv.UNSETTLED


class SimulationChecks(SimulationState):
    """The ``Simulation``'s checks of the message ledger against moto's queues."""

    def _no_message_lost(self, stack: LocalStack) -> Invariant:
        accounted = self._account(stack)
        lost = accounted.pop("_lost_examples")
        counts = {k: v for k, v in accounted.items() if v}
        detail = ", ".join(f"{k} {v}" for k, v in counts.items())
        if lost:
            return Invariant(False, f"{len(lost)} message(s) unaccounted for; {detail}", lost)
        return Invariant(True, f"every message sent is accounted for: {detail}")

    def _account(self, stack: LocalStack) -> dict[str, Any]:
        tracked = self.ledger.snapshot()
        dlqs = {d.name for d in observe.queue_depths(stack.cloud, stack.settings) if d.is_dlq}
        out: dict[str, Any] = {
            "sent": len(tracked),
            "done": 0,
            "waiting": 0,
            "delayed": 0,
            "in_flight": 0,
            "in_dlq": 0,
            "purged": 0,
            "lost": 0,
        }
        lost: list[str] = []
        with motopatch.LOCK:
            now_ms = motopatch._unix_time_millis()
            present: dict[str, Any] = {}
            for queue in stack.cloud.sqs_backend().queues.values():
                for message in queue._messages:
                    present[message.id] = (queue.name, message)
        for message_id, entry in tracked.items():
            if entry.status == "deleted":
                out["done"] += 1
                continue
            if entry.status == "purged":
                out["purged"] += 1
                continue
            found = present.get(message_id)
            if found is None or found[0] != entry.queue:
                out["lost"] += 1
                lost.append(f"{message_id} (sent to {entry.origin}, last in {entry.queue})")
                continue
            queue_name, message = found
            if queue_name in dlqs:
                out["in_dlq"] += 1
            elif message.delayed_until > now_ms:
                out["delayed"] += 1
            elif message.visible_at > now_ms:
                out["in_flight"] += 1
            else:
                out["waiting"] += 1
        out["_lost_examples"] = lost
        return out

    def _dlq_copies(self, stack: LocalStack) -> list[inv.DlqCopy]:
        """Every message in the DLQ and every entry of its archive, with what it names."""
        s = stack.settings
        copies: list[inv.DlqCopy] = []
        with motopatch.LOCK:
            queue = stack.cloud.sqs_backend().get_queue(s.queue("dlq").name)
            for message in queue._messages:
                attrs = {k: v.get("StringValue") for k, v in (message.message_attributes or {}).items()}
                copies.append(
                    inv.DlqCopy(
                        message.id,
                        "dlq",
                        attrs.get("run_id"),
                        attrs.get("dead_lettered_at"),
                        attrs.get("source_message_id"),
                    )
                )
        for item in observe.table_items(stack.cloud, s.table("dlq_archive")):
            attrs = item.get("attributes") or {}
            copies.append(
                inv.DlqCopy(
                    str(item["message_id"]),
                    "archive",
                    attrs.get("run_id"),
                    attrs.get("dead_lettered_at"),
                    attrs.get("source_message_id"),
                )
            )
        return copies


def _on_time(latency: dict[str, Any], wanted_pct: float) -> Invariant:
    window = latency["on_time_window_s"]
    if not latency["scheduled_runs"]:
        return Invariant(False, "no scheduled run to judge: the scenario expects some")
    started, total = latency["started"], latency["scheduled_runs"]
    pct = 100.0 * latency.get("on_time", 0) / total
    detail = (
        f"{pct:.2f} % of {total} scheduled runs started within {window} s (wanted {wanted_pct:g} %); "
        f"{started} started, p50 {latency.get('p50_s', 0):.1f} s, p99 {latency.get('p99_s', 0):.1f} s"
    )
    return Invariant(pct >= wanted_pct, detail)
