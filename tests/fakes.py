"""In-memory stand-ins for the engine's ports, for tests that need no cloud (no moto, no sleeps).

``memory_deps`` wires them into a ``Deps`` with the in-memory store
(``rebound.adapters.memory.MemoryStore``), the real sim target and the policies of
``config/tasks``. Time is a ``support.ManualClock``: queue delays and waits follow it.
"""

from __future__ import annotations

import itertools
import json
from collections import defaultdict
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from rebound import resources as r
from rebound.adapters.memory import MemoryStore
from rebound.adapters.targets.dispatch import TargetDispatcher
from rebound.adapters.targets.sim import SimInvoker
from rebound.config.loader import load_policy_book
from rebound.domain.events import EventType
from rebound.domain.notification import Notification
from rebound.domain.target_specs import TargetRules
from rebound.engine.deps import Deps
from rebound.engine.escalation import Escalation
from rebound.engine.executor import Executor, QueueMessage
from rebound.engine.policies import PolicyService
from rebound.engine.ports import (
    BatchResult,
    BusEvent,
    Channel,
    Listed,
    Outgoing,
    PeekedMessage,
    QueueBatches,
    QueueCounts,
    Received,
    RecurringSchedule,
    SentMessage,
    SequentialFanout,
    Synced,
    SyncResult,
)
from rebound.engine.ports.targets import Invocation, Outcome, TargetSpec
from rebound.engine.ports.transport import BATCH
from rebound.engine.retry_scheduler import RetryScheduler
from rebound.engine.workstreams import Workstreams
from rebound.settings import QueueRef, Settings, default_config_dir
from support import ManualClock

ACCOUNT_ARN = "arn:aws:sqs:us-east-1:123456789012"


def memory_settings(environment: str = "test", publish_events: tuple[str, ...] = ()) -> Settings:
    """Settings naming every resource of ``rebound.resources.SPEC``; nothing is provisioned."""
    return Settings(
        publish_events=publish_events,
        environment=environment,
        tables={t.logical: r.local_name(environment, t.logical) for t in r.SPEC.tables},
        queues={
            q.logical: QueueRef.from_arn(f"{ACCOUNT_ARN}:{r.local_name(environment, q.logical)}")
            for q in r.SPEC.queues
        },
        bus_name=r.local_name(environment, "bus"),
        schedule_group=r.local_name(environment, "schedules"),
        scheduler_role_arn="arn:aws:iam::123456789012:role/scheduler",
        event_source=r.SPEC.event_source,
        jitter_seed=7,
        config_dir=default_config_dir(),
        targets=TargetRules(sim=True),
    )


# ------------------------------------------------------------------------------------ queues
@dataclass
class FakeMessage:
    message_id: str
    body: str
    attributes: dict[str, Any]
    sent_at: datetime
    visible_at: datetime
    receive_count: int = 0


class FakeQueues:
    """Queues as lists; a message is visible once the clock reaches its delay."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.messages: dict[str, list[FakeMessage]] = defaultdict(list)
        self._ids = itertools.count(1)

    def send(
        self,
        queue: str,
        body: Mapping[str, Any] | str,
        *,
        delay_s: float = 0,
        attributes: Mapping[str, Any] | None = None,
        trace: str | None = None,
    ) -> SentMessage:
        now = self.clock.now()
        message_id = f"{queue}-{next(self._ids)}"
        text = body if isinstance(body, str) else json.dumps(body)
        self.messages[queue].append(
            FakeMessage(message_id, text, dict(attributes or {}), now, now + timedelta(seconds=delay_s))
        )
        return SentMessage(message_id, int(delay_s))

    def visible(self, queue: str) -> list[FakeMessage]:
        return [m for m in self.messages[queue] if m.visible_at <= self.clock.now()]

    def take(self, queue: str = "execution") -> list[FakeMessage]:
        """Receive and delete every visible message (what a successful batch does)."""
        taken = self.visible(queue)
        self.messages[queue] = [m for m in self.messages[queue] if m not in taken]
        return taken

    def bodies(self, queue: str) -> list[dict[str, Any]]:
        return [json.loads(m.body) for m in self.messages[queue]]

    def release(self, queue: str, receipt_handle: str) -> None:
        self.change_visibility(queue, receipt_handle, 0)

    def peek(self, queue: str, max_messages: int, visibility_s: int = 30) -> list[PeekedMessage]:
        return [
            PeekedMessage(
                m.message_id,
                m.body,
                m.message_id,
                m.receive_count,
                int(m.sent_at.timestamp() * 1000),
                {k: str(v) for k, v in m.attributes.items()},
            )
            for m in self.visible(queue)[:max_messages]
        ]

    def counts(self, queue: str) -> QueueCounts:
        visible = len(self.visible(queue))
        return QueueCounts(visible, 0, len(self.messages[queue]) - visible)

    def change_visibility(self, queue: str, receipt_handle: str, seconds: float) -> None:
        for m in self.messages[queue]:
            if m.message_id == receipt_handle:
                m.visible_at = self.clock.now() + timedelta(seconds=seconds)

    def delete(self, queue: str, receipt_handle: str) -> None:
        self.messages[queue] = [m for m in self.messages[queue] if m.message_id != receipt_handle]

    def depth(self, queue: str) -> int:
        return len(self.messages[queue])

    def batches(self) -> QueueBatches:
        return FakeBatches(self)


class FakeBatches:
    """The batch interface over ``FakeQueues``: what operators' replays send; a receive hands out
    every visible message with its id as the receipt handle."""

    def __init__(self, queues: FakeQueues) -> None:
        self.queues = queues
        self.requests = 0

    def receive(self, queue: str, *, visibility_s: int, wait_s: int = 0) -> list[Received]:
        self.requests += 1
        taken = self.queues.visible(queue)[:BATCH]
        for m in taken:
            m.receive_count += 1
            self.queues.change_visibility(queue, m.message_id, visibility_s)
        return [
            Received(
                m.message_id,
                m.message_id,
                m.body,
                {k: str(v) for k, v in m.attributes.items()},
                int(m.sent_at.timestamp() * 1000),
                m.receive_count,
            )
            for m in taken
        ]

    def send(self, queue: str, messages: Sequence[Outgoing]) -> BatchResult:
        self.requests += 1
        for m in messages:
            self.queues.send(queue, m.body, attributes=m.attributes)
        return BatchResult(ok=[m.key for m in messages])

    def delete(self, queue: str, messages: Sequence[tuple[str, str]]) -> BatchResult:
        self.requests += 1
        for _, handle in messages:
            self.queues.delete(queue, handle)
        return BatchResult(ok=[key for key, _ in messages])

    def set_visibility(self, queue: str, messages: Sequence[tuple[str, str]], seconds: int) -> BatchResult:
        self.requests += 1
        for _, handle in messages:
            self.queues.change_visibility(queue, handle, seconds)
        return BatchResult(ok=[key for key, _ in messages])

    def depth(self, queue: str) -> QueueCounts:
        return self.queues.counts(queue)


# ------------------------------------------------------------------------- schedules and bus
class FakeSchedules:
    def __init__(self) -> None:
        self.one_time: dict[str, tuple[datetime, dict[str, Any]]] = {}
        self.recurring: dict[str, dict[str, Any]] = {}
        self.changes = 0

    def create_one_time(self, name: str, when: datetime, payload: dict[str, Any]) -> bool:
        if name in self.one_time:
            return False
        self.one_time[name] = (when, payload)
        return True

    def put_recurring(self, schedule: RecurringSchedule, pace: Callable[[], None] = lambda: None) -> str:
        wanted = {
            "Name": schedule.name,
            "ScheduleExpression": schedule.expression,
            "ScheduleExpressionTimezone": schedule.timezone,
            "State": "ENABLED" if schedule.enabled else "DISABLED",
            "Target": {
                "Input": json.dumps(dict(schedule.payload)),
                **({"Arn": schedule.queue_arn} if schedule.queue_arn else {}),
            },
        }
        before = self.recurring.get(schedule.name)
        if before is not None and {k: v for k, v in before.items() if k != "LastModificationDate"} == wanted:
            return "unchanged"
        self.changes += 1
        self.recurring[schedule.name] = {**wanted, "LastModificationDate": str(self.changes)}
        return "created" if before is None else "updated"

    def sync_recurring(
        self,
        schedule: RecurringSchedule,
        *,
        known: Synced | None = None,
        listing: Mapping[str, Listed] | None = None,
        pace: Callable[[], None] = lambda: None,
    ) -> SyncResult:
        """Reads every schedule (no skipping): the fake keeps no fingerprints."""
        return SyncResult(self.put_recurring(schedule), None)

    def listing(self, prefix: str, pace: Callable[[], None] = lambda: None) -> dict[str, Listed]:
        return {
            n: Listed(s["LastModificationDate"], s["State"], s["Target"].get("Arn", ""))
            for n, s in self.recurring.items()
            if n.startswith(prefix)
        }

    def delete(self, name: str) -> bool:
        return self.recurring.pop(name, None) is not None or self.one_time.pop(name, None) is not None

    def get(self, name: str) -> dict[str, Any] | None:
        return self.recurring.get(name)

    def states(self, prefix: str) -> dict[str, str]:
        return {n: s["State"] for n, s in self.recurring.items() if n.startswith(prefix)}


class FakeBus:
    def __init__(self) -> None:
        self.published: list[BusEvent] = []
        self.rules: dict[str, dict[str, Any]] = {}

    def publish(self, events: Sequence[BusEvent]) -> list[str]:
        self.published.extend(events)
        return []

    def put_task_rule(
        self,
        name: str,
        task_id: str,
        pattern: str,
        queue_arn: str,
        dead_letter_arn: str,
        *,
        enabled: bool,
        description: str = "",
        starts: str = "task",
    ) -> str:
        rule = {"Name": name, "EventPattern": pattern, "State": "ENABLED" if enabled else "DISABLED"}
        rule["starts"] = starts
        before = self.rules.get(name)
        self.rules[name] = rule
        return "created" if before is None else "unchanged" if before == rule else "updated"

    def get_rule(self, name: str) -> dict[str, Any] | None:
        return self.rules.get(name)

    def delete_task_rule(self, name: str) -> bool:
        return self.rules.pop(name, None) is not None


# ---------------------------------------------------------------- notifications, metrics, targets
@dataclass
class FakeChannel:
    name: str = "inbox"
    sent: list[Notification] = field(default_factory=list)

    def send(self, note: Notification) -> str:
        self.sent.append(note)
        return f"{self.name}-{len(self.sent)}"


class FakeNotifier:
    def __init__(self, *channels: Channel) -> None:
        self._channels = list(channels)
        self.alerts: list[tuple[str, dict[str, Any], str]] = []

    @property
    def channels(self) -> Sequence[Channel]:
        return self._channels

    @property
    def names(self) -> list[str]:
        return [c.name for c in self._channels]

    def alert(self, subject: str, body: dict[str, Any], severity: str) -> list[str]:
        self.alerts.append((subject, body, severity))
        return []

    def alert_each(
        self,
        subject: str,
        body: dict[str, Any],
        severity: str,
        *,
        kind: str = "alert",
        done: Collection[str] = (),
    ) -> tuple[dict[str, str], dict[str, str]]:
        self.alerts.append((subject, body, severity))
        return {}, {}


class FakeMetrics:
    def __init__(self) -> None:
        self.counts: dict[str, float] = defaultdict(float)
        self.observations: dict[str, list[float]] = defaultdict(list)

    def count(self, name: str, value: float = 1.0) -> None:
        self.counts[name] += value

    def observe(self, name: str, value: float, unit: str = "Milliseconds") -> None:
        self.observations[name].append(value)


class HookedTargets(TargetDispatcher):
    """The real targets (the sim target), with a hook that may run while a task's target is called
    (another delivery arriving while an attempt runs)."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__({"sim": SimInvoker(clock)})
        self.calls: list[Invocation] = []
        self.during: dict[str, Callable[[], None]] = {}

    def invoke(self, target: TargetSpec, call: Invocation) -> Outcome:
        self.calls.append(call)
        hook = self.during.pop(call.task_id, None)
        if hook is not None:
            hook()
        return super().invoke(target, call)


# ------------------------------------------------------------------------------- the whole
@dataclass
class MemoryWorld:
    """The engine on in-memory ports, with handles on each fake."""

    clock: ManualClock
    store: MemoryStore
    queues: FakeQueues
    schedules: FakeSchedules
    targets: HookedTargets
    channel: FakeChannel
    metrics: FakeMetrics
    deps: Deps
    relayed: int = 0

    def execute(self, body: Mapping[str, Any], message_id: str = "m1", remaining_s: float = 300) -> str:
        return Executor(self.deps).process(QueueMessage(message_id, json.dumps(body)), remaining_s)

    def deliver(self, queue: str = "execution", remaining_s: float = 300) -> list[str]:
        """Process every visible message of the execution queue, as one batch would."""
        return [
            Executor(self.deps).process(
                QueueMessage(m.message_id, m.body, receive_count=m.receive_count + 1), remaining_s
            )
            for m in self.queues.take(queue)
        ]

    def relay(self) -> list[str]:
        """Hand the outbox events committed since the last relay to their consumers, as the bus
        rules do: a failed attempt to the retry scheduler, a dead letter to escalation."""
        events = self.store.events[self.relayed :]
        self.relayed += len(events)
        results: list[str] = []
        for event in events:
            if event.detail_type == EventType.EXECUTION_FAILED:
                scheduler = RetryScheduler(self.deps)
                results.append(scheduler.on_failed(event.detail["run_id"], int(event.detail["attempt"])))
            elif event.detail_type == EventType.DEAD_LETTERED:
                order = Escalation(self.deps).on_dead_lettered(event.detail)
                results.append(order.work_order_id if order is not None else "superseded")
            elif event.detail_type == EventType.WORKSTREAM_STEP_ENDED:
                results.append(Workstreams(self.deps).on_step_ended(event.detail))
            elif event.detail_type in (EventType.WORKSTREAM_FAILED, EventType.DEPENDENCY_CYCLE_DETECTED):
                results.append(Escalation(self.deps).on_workstream_failed(event.detail))
        return results

    def detail_types(self, subject: str | None = None) -> list[str]:
        return [e.detail_type for e in self.store.events if subject is None or e.subject == subject]


def memory_deps(clock: ManualClock | None = None, publish_events: tuple[str, ...] = ()) -> MemoryWorld:
    clock = clock or ManualClock()
    settings = memory_settings(publish_events=publish_events)
    store = MemoryStore(settings.event_source, published=settings.published_events())
    queues = FakeQueues(clock)
    schedules = FakeSchedules()
    targets = HookedTargets(clock)
    channel = FakeChannel()
    metrics = FakeMetrics()
    deps = Deps(
        settings=settings,
        clock=clock,
        store=store,
        queues=queues,
        schedules=schedules,
        bus=FakeBus(),
        targets=targets,
        notifier=FakeNotifier(channel),
        policies=PolicyService(store, load_policy_book(settings.config_dir), None),
        metrics=metrics,
        fanout=SequentialFanout(),
    )
    return MemoryWorld(clock, store, queues, schedules, targets, channel, metrics, deps)


@dataclass
class MemoryResources:
    """A ``ResourceBook`` in memory: ``limits`` is each resource's ``max_holders``."""

    limits: dict[str, int]
    held: dict[str, list[str]] = field(default_factory=dict)

    def acquire(self, resources: list[str], holder: str) -> bool:
        for resource in resources:
            inside = self.held.get(resource, [])
            if holder not in inside and len(inside) >= self.limits[resource]:
                return False
        for resource in resources:
            inside = self.held.setdefault(resource, [])
            if holder not in inside:
                inside.append(holder)
        return True

    def release(self, resources: list[str], holder: str) -> None:
        for resource in resources:
            if holder in self.held.get(resource, []):
                self.held[resource].remove(holder)

    def holders(self, resource: str) -> list[str]:
        return list(self.held.get(resource, []))
