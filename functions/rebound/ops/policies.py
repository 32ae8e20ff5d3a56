"""Retry policies for operators: list, show, and change one at run time.

A change is validated as a whole policy before anything is stored, then stored as a new version
with its audit record by ``PolicyService.set``; the next retry decision uses it.
``key=value`` values are read as YAML scalars or flow lists: ``max_attempts=5``,
``base_delay=30s``, ``jitter=full``, ``terminal_errors=[BAD_INPUT, GONE]``, ``max_age=null``.

``whatif`` replays the recorded failures of the runs that use a policy under proposed values
(``rebound.domain.prediction.whatif``), so an operator sees what a change would have done before storing it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import yaml

from rebound.config.loader import build_policy, merge_spec
from rebound.domain.approvals import POLICY, ApprovalRequest, approval_evidence
from rebound.domain.audit import verify_chain
from rebound.domain.audit_record import AuditRecord
from rebound.domain.durations import parse_duration
from rebound.domain.errors import PolicyNotFound, ValidationFailed
from rebound.domain.ids import policy_subject
from rebound.domain.prediction.whatif import Replayed, WhatIf, what_if
from rebound.domain.retry_policy import POLICY_FIELDS, RetryPolicy, TargetBudget
from rebound.domain.tenancy import ALL_TENANTS
from rebound.domain.timefmt import iso
from rebound.engine.deps import Deps
from rebound.ops.approvals import Approvals

WHATIF_SINCE = timedelta(days=7)
SECTIONS = {"target_budget": frozenset(TargetBudget.model_fields)}
"""Policy keys that are sections of their own, set key by key (``target_budget.threshold=20``)."""
WHATIF_LONGEST = timedelta(days=30)
WHATIF_SHORTEST = timedelta(minutes=1)


def policy_view(policy: RetryPolicy) -> dict[str, Any]:
    return policy.model_dump(mode="json")


def whatif_window(text: str) -> timedelta:
    """How far back a what-if replays: a duration (``7d``, ``12h``) from 1 minute to 30 days;
    ``ValidationFailed`` naming ``since`` otherwise."""
    try:
        seconds = parse_duration(text)
    except ValueError as exc:
        raise ValidationFailed(f"since: {exc}", key_path="since") from None
    if not WHATIF_SHORTEST.total_seconds() <= seconds <= WHATIF_LONGEST.total_seconds():
        raise ValidationFailed(f"since: give a window from 1m to 30d, not {text!r}", key_path="since")
    return timedelta(seconds=seconds)


def parse_assignments(assignments: Iterable[str]) -> dict[str, Any]:
    """``["max_attempts=5", "jitter=full"]`` -> ``{"max_attempts": 5, "jitter": "full"}``; a key of
    a section is dotted: ``target_budget.threshold=20`` -> ``{"target_budget": {"threshold": 20}}``."""
    changes: dict[str, Any] = {}
    for text in assignments:
        key, sep, raw = text.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValidationFailed(f"expected key=value, got {text!r}", key_path=text)
        top, dot, sub = key.partition(".")
        if top not in POLICY_FIELDS:
            raise ValidationFailed(
                f"unknown policy key {key!r}; valid keys: {', '.join(sorted(POLICY_FIELDS))}", key_path=key
            )
        section = SECTIONS.get(top)
        if dot and (section is None or sub not in section):
            known = ", ".join(f"{top}.{k}" for k in sorted(section or ()))
            raise ValidationFailed(
                f"unknown policy key {key!r}" + (f"; valid keys: {known}" if known else ""), key_path=key
            )
        where = changes.setdefault(top, {}) if dot else changes
        name = sub if dot else key
        if name in where or (not dot and isinstance(changes.get(top), dict) and top in SECTIONS):
            raise ValidationFailed(f"{key} is given twice", key_path=key)
        try:
            where[name] = yaml.safe_load(raw) if raw.strip() else None
        except yaml.YAMLError:
            raise ValidationFailed(f"{key}: cannot read value {raw!r}", key_path=key) from None
    if not changes:
        raise ValidationFailed("give at least one key=value", key_path="")
    return changes


@dataclass(frozen=True)
class PolicyChange:
    name: str
    before: RetryPolicy
    after: RetryPolicy
    changes: dict[str, Any]

    @property
    def diff(self) -> dict[str, tuple[Any, Any]]:
        old = policy_view(self.before)
        new = policy_view(self.after)
        return {k: (old.get(k), new.get(k)) for k in sorted(POLICY_FIELDS) if old.get(k) != new.get(k)}

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "from_version": self.before.version,
            "to_version": self.after.version,
            "changes": self.changes,
            "diff": {k: {"from": a, "to": b} for k, (a, b) in self.diff.items()},
        }


@dataclass(frozen=True)
class PolicyDetail:
    policy: RetryPolicy
    source: str
    versions: list[dict[str, Any]]
    trail: list[AuditRecord]
    audit_ok: bool

    def as_dict(self) -> dict[str, Any]:
        return {
            "policy": policy_view(self.policy),
            "source": self.source,
            "versions": self.versions,
            "audit": [
                {"seq": r.seq, "at": iso(r.at), "actor": r.actor, "action": r.action, "evidence": r.evidence}
                for r in self.trail
            ],
            "audit_verified": self.audit_ok,
        }


class PolicyOps:
    def __init__(self, deps: Deps, actor: str, approval: ApprovalRequest | None = None) -> None:
        self.deps = deps
        self.store = deps.store
        self.service = deps.policies
        self.actor = actor
        self.approval = approval
        """The approved request this change carries out (``rebound.ops.approvals``)."""

    def find(self) -> list[RetryPolicy]:
        return [self.service.effective(name) for name in self.service.names()]

    def show(self, name: str) -> PolicyDetail:
        policy = self.service.effective(name)
        versions = [
            {
                "version": int(v["version"]),
                "updated_at": v.get("updated_at"),
                "updated_by": v.get("updated_by"),
                "spec": v.get("spec"),
            }
            for v in self.store.policy_versions(name)
        ]
        source = "stored" if versions else str(self.service.book.source)
        subject = policy_subject(name)
        trail = self.store.audit_trail(subject)
        return PolicyDetail(
            policy, source, versions, trail, verify_chain(subject, trail, self.store.audit_keys.check).ok
        )

    def plan(self, name: str, changes: dict[str, Any]) -> PolicyChange:
        """Validate ``changes`` as the whole new policy, without storing anything."""
        before = self.service.effective(name)
        stored = self.store.latest_policy(name)
        if stored is not None:
            spec = dict(stored["spec"])
        elif name in self.service.book.named:
            spec = dict(self.service.book.named[name])
        else:  # pragma: no cover - effective() raised already
            raise PolicyNotFound(f"unknown retry policy {name!r}", name=name)
        after = build_policy(
            name, self.service.book.defaults, merge_spec(spec, changes), before.version + 1, f"policy {name}"
        )
        return PolicyChange(name, before, after, changes)

    def set(self, change: PolicyChange, reason: str = "") -> RetryPolicy:
        settings = self.deps.settings
        if self.approval is None and settings.approval_rules().policies_need_approval(settings.environment):
            Approvals(self.deps, self.actor).gate(
                POLICY,
                ALL_TENANTS,
                policy_subject(change.name),
                {"name": change.name, "changes": change.changes},
                reason or f"change retry policy {change.name}",
            )
        return self.service.set(
            change.name,
            change.changes,
            actor=self.actor,
            at=self.deps.clock.now(),
            evidence=approval_evidence(self.approval),
        )

    def whatif(self, name: str, changes: dict[str, Any], since: timedelta = WHATIF_SINCE) -> WhatIf:
        """Replay the recorded failures of the runs of every task that uses policy ``name`` (by
        name, or extending it) under the policy with ``changes``, against the policy as it is
        (``rebound.domain.prediction.whatif``). Reads each such task's runs of the window
        (``by_task_keys``)."""
        if not WHATIF_SHORTEST <= since <= WHATIF_LONGEST:
            raise ValidationFailed("since: give a window from 1m to 30d", key_path="since")
        change = self.plan(name, changes)
        until = self.deps.clock.now()
        start = until - since
        current: Replayed = []
        proposed: Replayed = []
        for stored in self.store.list_tasks():
            spec = stored.task.retry_policy
            base = spec if isinstance(spec, str) else spec.extends
            if base != name:
                continue
            runs = self.store.runs_for_task(stored.task.id, since=start, until=until, newest_first=False)
            if not runs:
                continue
            current.append((runs, self.service.for_task(stored.task)))
            if isinstance(spec, str):
                proposed.append((runs, change.after))
            else:
                merged = {
                    **change.after.model_dump(mode="json", exclude={"name", "version"}),
                    **spec.changes(),
                }
                proposed.append(
                    (runs, build_policy(name, {}, merged, change.after.version, f"task {stored.task.id}"))
                )
        return what_if(name, current, proposed, change.changes, start, until)
