"""Each log line in the format of the function whose invocation writes it.

On Lambda every function is a process of its own: its Powertools ``Logger`` (service
``rebound-<function>``) gives the engine's standard-library loggers its JSON format
(``rebound.handlers.observability.logger_for``), and ``inject_lambda_context`` adds the
invocation's keys (function name, request id, cold start) to that format before the handler runs.
So a line the executor's engine code writes says ``"service": "rebound-executor"`` and carries
the executor invocation's keys.

The local cloud runs every function in one process, where an engine logger such as
``rebound.engine.executor`` is shared by all of them. ``ByFunction`` chooses, for each line, the
formatter of the function whose invocation is writing it (``invocations.current``), so the local
log file and the meter's measure of a line (``billing.LogBytes``) see the line that function's
process would have written. A line written outside any invocation (the operations layer called
in-process, a test) gets the ``default`` format.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from rebound.resources import service_name
from rebound_local import invocations


class ByFunction(logging.Formatter):
    """Formats a record with the formatter of the function whose invocation logs it."""

    def __init__(
        self, by_service: Mapping[str, logging.Formatter], default: logging.Formatter | None
    ) -> None:
        super().__init__()
        self.by_service = dict(by_service)
        """Formatters by service name (``rebound-executor``), as the functions' loggers carry them."""
        self.default = default or logging.Formatter()

    def formatter_for(self, function: str | None) -> logging.Formatter:
        """The formatter of ``function`` (a ``FunctionSpec.logical``), or the default one."""
        if function is None:
            return self.default
        return self.by_service.get(service_name(function), self.default)

    def format(self, record: logging.LogRecord) -> str:
        current = invocations.current()
        return self.formatter_for(current.function if current is not None else None).format(record)


class Routed(logging.Handler):
    """A logger's handler in the local cloud: hands each line to the shared ``target`` (the log
    file, formatted ``ByFunction``) at the target's level.

    Its own formatter is the one the logger's function gave it (``None`` for an engine logger): a
    Powertools ``Logger`` created or asked again after the local cloud routed the logs finds its
    formatter on the first handler (``registered_formatter``), to append its invocation's keys to."""

    def __init__(self, target: logging.Handler, own: logging.Formatter | None) -> None:
        super().__init__(target.level)
        self.target = target
        self.formatter = own

    def emit(self, record: logging.LogRecord) -> None:
        self.target.handle(record)
