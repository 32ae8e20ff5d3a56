"""A change of one run and nothing else, committed without a transaction: the audit record first.

A transaction bills every item twice, so a run and its audit record cost four write units in one
and two written one after the other. The order keeps what the transaction gave:

1. **The audit record is the commit point.** Its put is conditional on its (subject, seq) not
   existing, and its seq is one more than the head of the run as read, so of two writers of the
   same run that read the same head exactly one commits; the other's record fails whole (a
   ``Conflict``, as a failed transaction was) and nothing of its change is written.
2. **The run's item follows**, guarded by the head and revision it was read at. An item that moved
   meanwhile (a poll, which writes no record) or a writer that stopped between the two writes
   (``AFTER_AUDIT_RECORD``, a crash point) leaves the item behind its chain; ``roll_forward`` applies the
   records after the item's head to it (``rebound.domain.audit.rolled_forward``).
3. **Whoever meets a run behind its chain rolls it forward.** A writer whose record conflicts
   rolls the run forward before it answers ``Conflict``, so the caller reads the run as its chain
   says when it decides again: the redelivered message of a claim or an outcome that stopped
   half-way, the sweeper's lease check, an operator's next action. ``rebound state check`` finds
   the rest.

A new run's clean claim stops after step 1 on purpose (``WriteAhead.run`` is ``None``): its
outcome creates the item, and ``get_run`` writes it from the lone record for a reader that comes
first (``claimed_alone``).

A unit with anything else in it (slots, counters, a work order, outbox events) stays one
transaction: only the change of one run with its records is written this way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from botocore.exceptions import BotoCoreError, ClientError

from rebound.adapters.dynamo.codec import from_item, to_item
from rebound.adapters.errors import translate
from rebound.domain.audit import rolled_forward
from rebound.domain.audit_record import AuditRecord
from rebound.domain.errors import Conflict, OperationalError
from rebound.domain.ids import run_subject
from rebound.domain.retention import Retention, run_expiry
from rebound.domain.run import Run, RunState
from rebound.domain.states import TERMINAL
from rebound.engine.ports import CrashPoints
from rebound.engine.ports.runtime import AFTER_AUDIT_RECORD
from rebound.resources import RECORD_TTL

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_dynamodb.type_defs import TransactWriteItemTypeDef

T = TypeVar("T")

ROLL_ATTEMPTS = 8
"""Tries of rolling a run forward whose item keeps moving under it (polls): each try reads again."""


@dataclass(frozen=True)
class WriteAhead:
    """A unit of work of one run's item and its audit records, in the order they are written."""

    run_id: str
    records: list[dict[str, Any]]
    """The ``Put`` of each record, in chain order."""
    labels: list[str]
    run: dict[str, Any] | None
    """The ``Put`` of the run's item, with its guard; ``None`` when the item waits for the run's
    next write (a new run's claim: ``UnitOfWork.save_run``'s ``defer_item``)."""

    @property
    def creates(self) -> bool:
        """Whether the item's put creates the run (guarded by its not existing)."""
        return self.run is not None and self.run.get("ConditionExpression") == "attribute_not_exists(run_id)"


def write_ahead_plan(
    items: list[TransactWriteItemTypeDef], labels: list[str], touchable: AbstractSet[str] = frozenset()
) -> WriteAhead | None:
    """The unit ``items`` as a write-ahead commit, if it is one run's item and its records alone,
    and the run as read is not one bookkeeping writes (``touchable``: ``rebound.domain.audit.bookkept``)."""
    runs = [i for i, label in enumerate(labels) if label.startswith("runs ")]
    if len(runs) != 1 or "Put" not in items[runs[0]]:
        return None
    run_id = labels[runs[0]].removeprefix("runs ")
    if run_id in touchable:
        return None
    prefix = f"audit {run_subject(run_id)} #"
    records = [i for i, label in enumerate(labels) if label.startswith(prefix)]
    if not records or len(records) + 1 != len(items) or any("Put" not in items[i] for i in records):
        return None
    return WriteAhead(
        run_id,
        records=[dict(items[i]["Put"]) for i in records],
        labels=[labels[i] for i in records],
        run=dict(items[runs[0]]["Put"]),
    )


def runs_behind(failed: list[str]) -> list[str]:
    """The runs whose next audit record was among a transaction's failed conditions: each one's
    chain holds that record already, so its item is behind (``roll_forward``)."""
    prefix = "audit " + run_subject("")
    return sorted(
        {label.removeprefix(prefix).rsplit(" #", 1)[0] for label in failed if label.startswith(prefix)}
    )


class DynamoWriteAhead:
    """The write-ahead commit of ``DynamoStore`` (a mixin)."""

    if TYPE_CHECKING:  # what it uses of ``DynamoStore``
        client: DynamoDBClient
        tables: dict[str, str]
        faults: CrashPoints
        retention: Retention | None
        _call: Callable[..., Any]
        _get: Callable[..., dict[str, Any] | None]
        _query: Callable[..., Iterator[dict[str, Any]]]
        _batch_get: Callable[..., Iterator[dict[str, Any]]]

        def retrying(self, attempts: int, call: Callable[[], T]) -> T: ...

        def stored_run(self, run_id: str) -> Run | None: ...

    def write_ahead(self, plan: WriteAhead, attempts: int) -> None:
        """Commit ``plan``: its records, then its item (see the module's docstring), each write
        tried up to ``attempts`` times under contention. ``Conflict`` when another writer's record
        holds a seq first (the run is rolled forward first)."""
        for put, label in zip(plan.records, plan.labels, strict=True):
            self._put_record(plan.run_id, put, label, attempts)
        self.faults.reached(AFTER_AUDIT_RECORD)
        if plan.run is None:
            return  # the record commits the run; its item waits (``WriteAhead.run``)
        try:
            self._put(f"write run {plan.run_id}", plan.run, attempts)
        except Conflict:
            # The item moved without a record (a poll), or someone already rolled it forward:
            # the chain says what it is now, this write's record included.
            self.roll_forward(plan.run_id)

    def _put(self, doing: str, put: dict[str, Any], attempts: int, resent: list[bool] | None = None) -> None:
        """Put, trying again under contention. ``resent`` is set when the SDK sent a try again on
        its own (a lost answer, a timeout): a try before the one that answered may have been
        written, so a failed condition is ambiguous (the item that failed it may be this put's)."""

        def once() -> None:
            try:
                self.client.put_item(**put)
            except ClientError as exc:
                if resent is not None and exc.response.get("ResponseMetadata", {}).get("RetryAttempts"):
                    resent[0] = True
                raise translate(exc, doing) from exc
            except BotoCoreError as exc:
                raise translate(exc, doing) from exc

        self.retrying(attempts, once)

    def _put_record(self, run_id: str, put: dict[str, Any], label: str, attempts: int) -> None:
        resent = [False]
        try:
            self._put(f"commit {label}", put, attempts, resent)
            return
        except Conflict as exc:
            if resent[0] and self._holds(put):
                return  # this record, written by a try whose answer was lost
            self.roll_forward(run_id)
            exc.details["failed"] = [f"runs {run_id}", label]
            raise

    def _holds(self, put: dict[str, Any]) -> bool:
        """Whether the audit table holds exactly the record ``put`` writes. Only asked after the
        SDK sent the put more than once: two writers' records can be byte for byte the same (two
        copies of one message in one batch, at one millisecond), so equal content alone does not
        tell whose the record is."""
        ours = from_item(put["Item"])
        held = self._get("audit", {"subject": ours["subject"], "seq": ours["seq"]})
        return held is not None and held.get("hash") == ours["hash"]

    def chains_begun(self, run_ids: list[str]) -> set[str]:
        """Which of ``run_ids`` have a first audit record (a run exists from its first record; a
        claim may have committed it alone): a keys-only ``BatchGetItem``, 100 a call."""
        first = self._batch_get(
            "audit",
            "subject",
            run_ids,
            keys_only=True,
            key_of=lambda r: {"subject": run_subject(r), "seq": 1},
        )
        return {str(data["subject"]).removeprefix(run_subject("")) for data in first}

    def claimed_alone(self, run_id: str) -> Run | None:
        """The run rolled forward from its chain if the chain is a lone record that started a
        running attempt and there is no item (one strongly consistent query of two records)."""
        subject = run_subject(run_id)
        first = list(
            self._query(
                "audit",
                f"read the first records of {subject}",
                KeyConditionExpression="subject = :s",
                ExpressionAttributeValues={":s": {"S": subject}},
                ConsistentRead=True,
                Limit=2,
                max_items=2,
            )
        )
        if len(first) != 1 or first[0].get("to_state") != RunState.RUNNING.value:
            return None
        return self.roll_forward(run_id)

    def roll_forward(self, run_id: str) -> Run | None:
        """Bring ``run_id``'s item up to its chain: apply each record after the item's head (a
        run whose item was never written is rebuilt from its whole chain). Returns the run as
        it now is (``None``: no item and no chain)."""
        subject = run_subject(run_id)
        for _ in range(ROLL_ATTEMPTS):
            stored = self.stored_run(run_id)
            after = stored.audit_seq if stored is not None else 0
            records = self._records_after(subject, after)
            if not records:
                return stored
            run = rolled_forward(run_id, stored, records)
            run = run.model_copy(update={"rev": (stored.rev if stored is not None else 0) + 1})
            put: dict[str, Any] = {
                "TableName": self.tables["runs"],
                "Item": to_item(
                    {
                        **run.model_dump(mode="json"),
                        RECORD_TTL: run_expiry(self.retention, run.state in TERMINAL, run.updated_at),
                    },
                    "runs",
                ),
            }
            if stored is None:
                put["ConditionExpression"] = "attribute_not_exists(run_id)"
            else:
                put["ConditionExpression"] = "audit_seq = :seq AND (attribute_not_exists(rev) OR rev = :rev)"
                put["ExpressionAttributeValues"] = {
                    ":seq": {"N": str(stored.audit_seq)},
                    ":rev": {"N": str(stored.rev)},
                }
            try:
                self._call(f"roll run {run_id} forward", self.client.put_item, **put)
                return run
            except Conflict:
                continue  # it moved again: read it again
        raise OperationalError(f"run {run_id} kept moving while being rolled forward to its audit chain")

    def _records_after(self, subject: str, seq: int) -> list[AuditRecord]:
        items = self._query(
            "audit",
            f"read audit trail of {subject} after #{seq}",
            KeyConditionExpression="subject = :s AND seq > :n",
            ExpressionAttributeValues={":s": {"S": subject}, ":n": {"N": str(seq)}},
            ConsistentRead=True,
        )
        return [AuditRecord.model_validate(d) for d in items]
