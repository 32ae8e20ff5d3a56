"""The target port: one call of a task's target for one attempt, its outcome, and what the engine
calls (``Targets``). The invokers (http, lambda, sim) and their dispatcher are adapters
(``rebound.adapters.targets``)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from rebound.domain.target_specs import CapacityReserve, HttpTarget, LambdaTarget, PluginTarget, SimTarget

TargetSpec = SimTarget | LambdaTarget | HttpTarget | PluginTarget | CapacityReserve
"""What the dispatcher calls: a task's target, or a capacity service before an attempt."""
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


class Targets(Protocol):
    """What the engine calls to run a task's target (``rebound.adapters.targets.TargetDispatcher``)."""

    def invoke(self, target: TargetSpec, call: Invocation) -> Outcome: ...
