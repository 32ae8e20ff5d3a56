"""Effective retry policies: the file's version 0, or the latest version an operator stored."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from rebound.config.loader import PolicyBook, build_policy, merge_spec
from rebound.domain.errors import Conflict, PolicyNotFound, ValidationFailed
from rebound.domain.ids import policy_subject
from rebound.domain.retry_policy import POLICY_FIELDS, RetryPolicy
from rebound.domain.stored import StoredTask
from rebound.domain.task import Task
from rebound.domain.timefmt import iso
from rebound.engine.ports import Store


@dataclass(frozen=True)
class TaskPolicy:
    """A run's task (``None`` if it was deleted) and the policy its next decision uses."""

    stored: StoredTask | None
    policy: RetryPolicy
    problem: str | None = None
    """Why ``policy`` is ``default`` instead of the task's own (this deployment does not know it)."""


class PolicyService:
    def __init__(self, store: Store, book: PolicyBook, deployed: tuple[str, ...] | None = None) -> None:
        self.store = store
        self.book = book
        self.deployed = deployed
        """The named policies the environment's functions were deployed with (None: not known)."""

    def missing_in_environment(self, name: str) -> bool:
        """Whether the environment's functions would not know policy ``name``: neither deployed
        with their bundle nor stored at run time. (The CLI's own config may have it.)"""
        if self.deployed is None or name in self.deployed:
            return False
        return self.store.latest_policy(name) is None

    def names(self) -> list[str]:
        return sorted(set(self.book.names()) | set(self.store.stored_policy_names()))

    def _spec(self, name: str) -> tuple[dict[str, Any], int]:
        stored = self.store.latest_policy(name)
        if stored is not None:
            return dict(stored["spec"]), int(stored["version"])
        if name in self.book.named:
            return dict(self.book.named[name]), 0
        raise PolicyNotFound(f"unknown retry policy {name!r}; known: {', '.join(self.names())}", name=name)

    def effective(self, name: str) -> RetryPolicy:
        spec, version = self._spec(name)
        return build_policy(name, self.book.defaults, spec, version, f"policy {name}")

    def for_task(self, task: Task | None) -> RetryPolicy:
        """The policy a task's next retry decision uses. Unknown tasks get ``default``."""
        if task is None:
            return self.effective("default")
        spec = task.retry_policy
        if isinstance(spec, str):
            return self.effective(spec)
        base = self.effective(spec.extends)
        merged = {**base.model_dump(mode="json", exclude={"name", "version"}), **spec.changes()}
        return build_policy(base.name, {}, merged, base.version, f"task {task.id} retry_policy")

    def for_task_or_default(self, task: Task | None) -> tuple[RetryPolicy, str | None]:
        """The task's policy, or, when this deployment does not know it (a name the CLI accepted
        from another config, a stored override that no longer validates), ``default`` and why."""
        try:
            return self.for_task(task), None
        except (PolicyNotFound, ValidationFailed) as exc:
            return self.effective("default"), exc.message

    def for_stored(self, stored: StoredTask | None) -> TaskPolicy:
        policy, problem = self.for_task_or_default(stored.task if stored else None)
        return TaskPolicy(stored, policy, problem)

    def of_task(self, task_id: str) -> TaskPolicy:
        """The one way the engine finds a run's task and its effective policy."""
        return self.for_stored(self.store.get_task(task_id))

    def set(
        self,
        name: str,
        changes: dict[str, Any],
        *,
        actor: str,
        at: datetime,
        evidence: dict[str, Any] | None = None,
    ) -> RetryPolicy:
        """Store a new version of a named policy with ``changes`` applied, audited (``evidence``
        added to the record: an approval it carries out)."""
        unknown = sorted(set(changes) - POLICY_FIELDS)
        if unknown:
            valid = ", ".join(sorted(POLICY_FIELDS))
            raise ValidationFailed(
                f"unknown policy key(s): {', '.join(unknown)}; valid keys: {valid}", key_path=unknown[0]
            )
        spec, version = self._spec(name)
        new_spec = merge_spec(spec, changes)
        policy = build_policy(name, self.book.defaults, new_spec, version + 1, f"policy {name}")
        uow = self.store.unit_of_work(actor, at)
        record = uow.append_audit(
            policy_subject(name),
            action="policy-changed",
            evidence={
                "from_version": version,
                "to_version": version + 1,
                "changes": changes,
                "spec": new_spec,
                **(evidence or {}),
            },
        )
        uow.add_policy_version(
            name,
            version + 1,
            {"spec": new_spec, "updated_at": iso(at), "updated_by": actor, "audit_seq": record.seq},
        )
        try:
            uow.commit()
        except Conflict as exc:
            raise Conflict(f"policy {name} changed while you edited it; read it again", name=name) from exc
        return policy
