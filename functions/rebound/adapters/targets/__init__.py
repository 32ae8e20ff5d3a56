"""What a task runs: an invoker per target type (``http``, ``aws_lambda``, ``sim``), the
dispatcher the engine's ``Targets`` port is given (``TargetDispatcher``), and their registry."""

from rebound.adapters.targets.dispatch import TargetDispatcher

__all__ = ["TargetDispatcher"]
