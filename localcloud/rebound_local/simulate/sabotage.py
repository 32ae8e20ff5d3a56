"""The scenario's sabotage: deliberate breakage, each piece of which one invariant must catch.

Messages dropped from the execution queue, target calls made twice, leaked slots, stranded runs,
stale audit heads, removed work orders and DLQ messages, delivered fires recorded as missed and
tampered audit records. The duplicate fires are sent where fires are watched (``run``).
"""

from __future__ import annotations

import json
from typing import Any

from rebound.domain.timefmt import parse_utc
from rebound_local import motopatch, observe
from rebound_local.simulate.state import SimulationState
from rebound_local.stack import LocalStack


class SimulationSabotage(SimulationState):
    """The ``Simulation``'s sabotage, applied while it runs and at its end."""

    def _drop_last(self, stack: LocalStack, queue_name: str) -> None:
        """Sabotage: the message just sent vanishes from the queue, as if SQS had lost it."""
        with motopatch.LOCK:
            queue = stack.cloud.sqs_backend().get_queue(queue_name)
            if not queue._messages:
                return
            message = queue._messages.pop()
        self._drops_left -= 1
        self.dropped.append({"queue": queue_name, "message_id": message.id, "body": message.body[:200]})

    def _double_target_calls(self, stack: LocalStack) -> None:
        """Sabotage: the first ``call_target_twice`` target calls are made twice."""
        budget = [self.scenario.sabotage.call_target_twice]
        if not budget[0]:
            return
        targets = stack.targets
        invoke = targets.invoke

        def twice(target: Any, call: Any) -> Any:
            if budget[0] > 0:
                budget[0] -= 1
                invoke(target, call)
                self.sabotaged.setdefault("call_target_twice", []).append(
                    f"{call.run_id} attempt {call.attempt}"
                )
            return invoke(target, call)

        targets.invoke = twice  # type: ignore[method-assign]

    def _sabotage_end(self, stack: LocalStack) -> None:
        """Sabotage at the end, each breaking one invariant: leaked slots, stranded runs, lost DLQ
        messages, delivered fires recorded as missed."""
        sab = self.scenario.sabotage
        if not any(
            (
                sab.leak_slots,
                sab.strand_runs,
                sab.remove_dlq_messages,
                sab.skip_delivered_fires,
                sab.remove_work_orders,
                sab.stale_heads,
                sab.forget_fire_segments,
                sab.reopen_work_orders,
                sab.rerun_completed_steps,
                sab.reopen_superseded_orders,
            )
        ):
            return
        from moto.dynamodb.models.dynamo_type import DynamoType

        from rebound.adapters.dynamo import DOC

        s = stack.settings
        backend = stack.cloud.dynamodb_backend()
        runs = observe.table_items(stack.cloud, s.table("runs"))
        done = [r for r in runs if r["state"] == "succeeded"]
        delivered = {f.run_id for f in self.fires}
        with motopatch.LOCK:
            for n, run in enumerate(done[: sab.leak_slots]):
                backend.put_item(
                    s.table("control"),
                    {
                        "pk": {"S": f"slots#sabotage#{n}"},
                        "holders": {"SS": [run["run_id"]]},
                        "cap": {"N": "1"},
                    },
                )
                self.sabotaged.setdefault("leak_slots", []).append(run["run_id"])
            stranded = done[sab.leak_slots : sab.leak_slots + sab.strand_runs]
            for n, run in enumerate(stranded):  # the first left running, the others pending
                table = backend.get_table(s.table("runs"))
                item = table.items[DynamoType({"S": run["run_id"]})]
                doc = json.loads(observe.stored_doc(item.attrs[DOC]))
                if "state" in doc:  # a clean success keeps the index's keys in doc: a bad write moved them
                    item.attrs["updated_at"] = DynamoType({"S": doc.pop("updated_at")})
                    doc.pop("state")
                    observe.write_doc(item, doc)
                item.attrs["state"] = DynamoType({"S": "running" if n == 0 else "pending"})
                motopatch._index_of(table).place(item)
                self.sabotaged.setdefault("strand_runs", []).append(run["run_id"])
            others = done[sab.leak_slots + sab.strand_runs :][: sab.stale_heads]
            for run in others:
                item = backend.get_table(s.table("runs")).items[DynamoType({"S": run["run_id"]})]
                item.attrs["audit_seq"] = DynamoType({"N": str(int(run["audit_seq"]) + 1)})
                self.sabotaged.setdefault("stale_heads", []).append(run["run_id"])
            self._forget_segments(stack, runs, sab.forget_fire_segments)
            orders = backend.get_table(s.table("workorders"))
            linked = [
                r["work_order_id"] for r in runs if r["state"] == "dead_lettered" and r.get("work_order_id")
            ]
            for order_id in linked[: sab.remove_work_orders]:
                orders.delete_item(DynamoType({"S": order_id}), None)
                self.sabotaged.setdefault("remove_work_orders", []).append(order_id)
            self._reopen(orders, sab.reopen_work_orders)
            self._reopen(
                orders,
                sab.reopen_superseded_orders,
                of_runs={str(r["run_id"]) for r in runs if r["state"] == "superseded"},
            )
            self._rerun_steps(stack, runs, sab.rerun_completed_steps)
            dead = {r["dlq_message_id"]: r["run_id"] for r in runs if r["state"] == "dead_lettered"}
            queue = stack.cloud.sqs_backend().get_queue(s.queue("dlq").name)
            gone = [m for m in queue._messages if m.id in dead][: sab.remove_dlq_messages]
            for message in gone:  # as an operator's purge would: accounted for, but gone
                queue._messages.remove(message)
                self.ledger.purged(queue.name, [message.id])
                self.sabotaged.setdefault("remove_dlq_messages", []).append(dead[message.id])
        if sab.skip_delivered_fires:
            self._skip_delivered(
                stack, [r for r in done if r["run_id"] in delivered][-sab.skip_delivered_fires :]
            )

    def _forget_segments(self, stack: LocalStack, runs: list[dict[str, Any]], count: int) -> None:
        """The fire segments of ``count`` tasks with clean successes listed by their fires are
        gone, as a write that lost them would leave (the caller holds ``motopatch.LOCK``)."""
        if not count:
            return
        from moto.dynamodb.models.dynamo_type import DynamoType

        from rebound.adapters.dynamo import DOC
        from rebound.domain.run import found_by_fire

        table = stack.cloud.dynamodb_backend().get_table(stack.settings.table("tasks"))
        for task_id in sorted({str(r["task_id"]) for r in runs if found_by_fire(r)})[:count]:
            item = table.items[DynamoType({"S": task_id})]
            doc = json.loads(observe.stored_doc(item.attrs[DOC]))
            doc.pop("fire_segments", None)
            observe.write_doc(item, doc)
            self.sabotaged.setdefault("forget_fire_segments", []).append(task_id)

    def _rerun_steps(self, stack: LocalStack, runs: list[dict[str, Any]], count: int) -> None:
        """A second succeeded run of ``count`` succeeded workstream steps, as a completed step run
        again would leave (the caller holds ``motopatch.LOCK``)."""
        if not count:
            return
        from moto.dynamodb.models.dynamo_type import DynamoType

        table = stack.cloud.dynamodb_backend().get_table(stack.settings.table("runs"))
        steps = [r for r in runs if r["state"] == "succeeded" and r.get("workstream_run")]
        for run in steps[:count]:
            item = table.items[DynamoType({"S": run["run_id"]})]
            again = f"{run['run_id']}-again"
            attrs = {k: v.to_json() for k, v in item.attrs.items()}
            attrs["run_id"] = {"S": again}
            table.put_item(attrs)
            self.sabotaged.setdefault("rerun_completed_steps", []).append(again)

    def _reopen(self, orders: Any, count: int, of_runs: set[str] | None = None) -> None:
        """Set resolved work orders of runs (of ``of_runs``, if given) back to open, as a bad write
        would, leaving their audit chains as they are (the caller holds ``motopatch.LOCK``)."""
        if not count:
            return
        from moto.dynamodb.models.dynamo_type import DynamoType

        from rebound.adapters.dynamo import DOC

        decoded = [(observe.decode_item(item), item) for item in orders.items.values()]
        resolved = [
            (order, item)
            for order, item in sorted(decoded, key=lambda pair: str(pair[0]["work_order_id"]))
            if order.get("state") == "resolved"
            and str(order.get("subject", "")).startswith("run#")
            and (of_runs is None or str(order.get("run_id")) in of_runs)
        ]
        for order, item in resolved[:count]:
            if "state" in item.attrs:
                item.attrs["state"] = DynamoType({"S": "open"})
            if DOC in item.attrs:
                doc = json.loads(observe.stored_doc(item.attrs[DOC]))
                doc.update(state="open", resolution=None, resolved_at=None, resolved_by=None)
                observe.write_doc(item, doc)
            kind = "reopen_work_orders" if of_runs is None else "reopen_superseded_orders"
            self.sabotaged.setdefault(kind, []).append(str(order["work_order_id"]))

    def _skip_delivered(self, stack: LocalStack, runs: list[dict[str, Any]]) -> None:
        """Replace delivered fires' runs by runs the ledger records as missed (with valid chains)."""
        from moto.dynamodb.models.dynamo_type import DynamoType

        from rebound.engine.ledger import Ledger

        s = stack.settings
        backend = stack.cloud.dynamodb_backend()
        ledger = Ledger(stack.deps, actor="ledger")
        for run in runs:
            with motopatch.LOCK:
                backend.get_table(s.table("runs")).delete_item(DynamoType({"S": run["run_id"]}), None)
                audit = backend.get_table(s.table("audit"))
                audit.items.pop(DynamoType({"S": f"run#{run['run_id']}"}), None)
                outbox = backend.get_table(s.table("outbox"))
                prefix = f"run#{run['run_id']}#"
                for key in [k for k in outbox.items if str(k.value).startswith(prefix)]:
                    outbox.delete_item(key, None)
            stored = stack.deps.store.get_task(run["task_id"])
            ledger._record_skipped(stored, parse_utc(str(run["scheduled_for"])), stack.clock.now())
            self.sabotaged.setdefault("skip_delivered_fires", []).append(run["run_id"])

    def _tamper(self, stack: LocalStack) -> None:
        """Sabotage: edit stored audit records after the fact, as a tamperer with table access would."""
        wanted = self.scenario.sabotage.tamper_audit_records
        if not wanted:
            return

        with motopatch.LOCK:
            table = stack.cloud.dynamodb_backend().get_table(stack.settings.table("audit"))
            for by_range in table.items.values():
                if len(self.tampered) >= wanted:
                    break
                item = next(iter(by_range.values()))
                doc = json.loads(observe.stored_doc(item.attrs["doc"]))
                doc["actor"] = "someone-else"
                observe.write_doc(item, doc)
                self.tampered.append(f"{item.attrs['subject'].value} #{item.attrs['seq'].value}")
