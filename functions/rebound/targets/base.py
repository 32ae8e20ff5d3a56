"""The target port: one call of a task's target for one attempt, and its outcome."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from rebound.domain.target_specs import HttpTarget, LambdaTarget, SimTarget

TargetSpec = SimTarget | LambdaTarget | HttpTarget
log = logging.getLogger(__name__)

TIMEOUT = "TIMEOUT"
TARGET_ERROR = "TARGET_ERROR"


@dataclass(frozen=True)
class Invocation:
    run_id: str
    task_id: str
    tenant: str
    attempt: int
    scheduled_for: datetime
    payload: dict[str, Any]
    deadline: datetime
    trace_id: str = ""

    @property
    def idempotency_key(self) -> str:
        """Targets should treat repeated calls with the same key as one."""
        return f"{self.run_id}#{self.attempt}"


@dataclass(frozen=True)
class Outcome:
    ok: bool
    error_code: str | None = None
    message: str = ""
    retryable: bool = True
    output: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def success(cls, output: dict[str, Any] | None = None) -> Outcome:
        return cls(True, output=output or {})

    @classmethod
    def failure(cls, code: str, message: str, *, retryable: bool = True) -> Outcome:
        return cls(False, code, message[:1000], retryable)


class TargetInvoker(Protocol):
    def invoke(self, target: Any, call: Invocation) -> Outcome: ...


class Targets:
    """Dispatches a call to the invoker of the target's type."""

    def __init__(self, invokers: Mapping[str, TargetInvoker]) -> None:
        self.invokers = dict(invokers)

    def invoke(self, target: TargetSpec, call: Invocation) -> Outcome:
        invoker = self.invokers.get(target.type)
        if invoker is None:
            return Outcome.failure(
                "UNSUPPORTED_TARGET", f"no invoker for target type {target.type!r}", retryable=False
            )
        try:
            return invoker.invoke(target, call)
        except Exception as exc:  # a target's own bug must fail the attempt, not the batch
            log.exception("target %s raised", target.type)
            return Outcome.failure(TARGET_ERROR, f"{type(exc).__name__}: {exc}")
