"""What a task runs. Each target type has an invoker; ``Targets`` dispatches by type."""

from rebound.targets.base import Invocation, Outcome, TargetInvoker, Targets

__all__ = ["Invocation", "Outcome", "TargetInvoker", "Targets"]
