"""``rebound flags list|set`` and ``GET /flags``, ``PUT /flags/<name>``: the environment's feature
flags (``rebound.domain.flags``), read as stored and changed without a deploy.

A change is a new version of the flags' AppConfig profile, deployed at once on AWS (handlers read
it within ``MAX_AGE_S``), and one audit record on the environment's flags chain (``flags#<env>``:
the flag, its value before and after, the actor and their reason). Setting a flag to the value it
has changes nothing and records nothing, unless that value was set without its record (a change
whose record failed): the record is written then.

``task-scheduler-v3`` also lives in Scheduler: a jittered task's schedules carry a flexible time
window. Switching it rewrites the schedules of every task and workstream with a ``jitter_window``
(without a window while it is off, so they fire at the exact instant; with it again when on).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from rebound.domain.errors import ValidationFailed
from rebound.domain.flags import DEFAULTS, FLAGS, TASK_SCHEDULER_V3, known_flag
from rebound.engine.deps import Deps
from rebound.engine.ports import DefaultFlags

ACTION = "flag-set"


def flags_subject(environment: str) -> str:
    return f"flags#{environment}"


class FlagOps:
    def __init__(self, deps: Deps, actor: str) -> None:
        self.deps = deps
        self.actor = actor

    def _admin(self) -> Any:
        admin = getattr(self.deps.flags, "admin", None)
        if admin is None:
            raise ValidationFailed(
                "this environment has no feature flags store (every flag is on); deploy this "
                "version of the stack, or run `rebound local up` again, which creates it",
                field="flags",
            )
        return admin

    def list(self) -> list[dict[str, Any]]:
        values = self._admin().values()
        return [
            {"name": name, "on": values[name], "default": DEFAULTS[name], "what": what}
            for name, what in FLAGS.items()
        ]

    def set(self, name: str, on: bool, reason: str | None = None) -> dict[str, Any]:
        """Turn ``name`` on or off. Run again after a failure part-way, it finishes the change:
        a value already set whose audit record is missing gets it then (``found_set``), and the
        schedules of ``task-scheduler-v3`` are brought to the value either way."""
        known_flag(name)
        admin = self._admin()
        values = admin.values()
        before = values[name]
        result: dict[str, Any] = {"name": name, "on": on, "changed": before != on}
        if before != on:
            result["version"] = admin.publish({**values, name: on})
            self._record(name, on, {"version": result["version"]}, reason)
        elif self._recorded(name, DEFAULTS[name]) != on:
            # set, but not recorded: a change whose audit record failed (or made outside Rebound)
            self._record(name, on, {"found_set": True}, reason)
            result["recorded"] = True
        forget = getattr(self.deps.flags, "forget", None)
        if forget is not None:
            forget()  # this process reads the new value at once
        if name == TASK_SCHEDULER_V3:
            result["schedules_written"] = self._rewrite_jittered(on)
        return result

    def _recorded(self, name: str, default: bool) -> bool:
        """The value the flags' audit chain last recorded for ``name`` (never set: ``default``)."""
        trail = self.deps.store.audit_trail(flags_subject(self.deps.settings.environment))
        found = [r.to_state == "on" for r in trail if r.action == ACTION and r.evidence.get("flag") == name]
        return found[-1] if found else default

    def _record(self, name: str, on: bool, evidence: dict[str, Any], reason: str | None) -> None:
        uow = self.deps.store.unit_of_work(self.actor, self.deps.clock.now())
        uow.append_audit(
            flags_subject(self.deps.settings.environment),
            action=ACTION,
            from_state="off" if on else "on",
            to_state="on" if on else "off",
            evidence={"flag": name, **evidence, **({"reason": reason} if reason else {})},
        )
        uow.commit()

    def _rewrite_jittered(self, on: bool) -> int:
        """The schedules of jittered tasks and workstreams, with or without their window."""
        from rebound.ops.tasks import TaskOps
        from rebound.ops.workstreams import WorkstreamOps

        deps = replace(self.deps, flags=DefaultFlags({TASK_SCHEDULER_V3: on}))  # deployed or not yet
        written = 0
        tasks = TaskOps(deps, self.actor)
        for stored in self.deps.store.list_tasks():
            if stored.task.schedule is not None and stored.task.schedule.jitter_window:
                written += tasks.write_triggers(stored.task, stored)[0]
        workstreams = WorkstreamOps(deps, self.actor)
        for workstream_id in workstreams.engine.ids():
            definition = workstreams.engine.definition(workstream_id)[0]
            if definition.schedule is not None and definition.schedule.jitter_window:
                written += workstreams.write_starts(definition)[0]
        return written
