"""Dispatches a target call to the invoker of the target's type."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from rebound.engine.ports.targets import TARGET_ERROR, Invocation, Outcome, TargetInvoker, TargetSpec

log = logging.getLogger(__name__)


class TargetDispatcher:
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
