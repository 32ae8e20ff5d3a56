"""Local log lines in the format of the function whose invocation writes them, as on Lambda."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from aws_lambda_powertools.logging.formatter import LambdaPowertoolsFormatter

from rebound.handlers.observability import logger_for
from rebound_local import billing
from rebound_local.invocations import Invocation, Lane, working_for
from rebound_local.logformat import ByFunction, Routed
from rebound_local.stack import route_logs


def _record(logger: str = "rebound.engine.executor") -> logging.LogRecord:
    return logging.LogRecord(logger, logging.INFO, __file__, 1, "attempt finished", None, None)


def _in(function: str) -> Lane:
    return Lane(Invocation(function, datetime(2026, 3, 7, tzinfo=UTC)))


def _formatters() -> tuple[LambdaPowertoolsFormatter, LambdaPowertoolsFormatter]:
    executor = LambdaPowertoolsFormatter(service="rebound-executor")
    executor.append_keys(function_request_id="req-executor")
    sweeper = LambdaPowertoolsFormatter(service="rebound-sweeper")
    return executor, sweeper


def test_a_line_takes_the_format_of_the_function_whose_invocation_writes_it() -> None:
    executor, sweeper = _formatters()
    default = logging.Formatter("%(message)s")
    formatter = ByFunction({"rebound-executor": executor, "rebound-sweeper": sweeper}, default)
    record = _record()

    with working_for(_in("executor")):
        assert formatter.format(record) == executor.format(record)
        assert json.loads(formatter.format(record))["function_request_id"] == "req-executor"
    with working_for(_in("sweeper")):
        line = json.loads(formatter.format(record))
        assert line["service"] == "rebound-sweeper" and "function_request_id" not in line
    with working_for(_in("ops_api")):  # a function without a logger of its own
        assert formatter.format(record) == "attempt finished"
    assert formatter.format(record) == "attempt finished"  # outside any invocation


def test_the_meter_measures_a_line_in_its_functions_format() -> None:
    counted: list[int] = []

    class Meter:
        def logged(self, nbytes: int) -> None:
            counted.append(nbytes)

    executor, sweeper = _formatters()
    handler = billing.LogBytes(
        Meter(),  # type: ignore[arg-type]
        ByFunction({"rebound-executor": executor, "rebound-sweeper": sweeper}, sweeper),
    )
    record = _record()
    with working_for(_in("executor")):
        handler.handle(record)
    with working_for(_in("sweeper")):
        handler.handle(record)
    assert counted == [len(executor.format(record).encode()) + 1, len(sweeper.format(record).encode()) + 1]
    assert counted[0] > counted[1]  # the executor's line carries its invocation's request id


@pytest.fixture
def loggers_restored() -> Iterator[None]:
    names = [n for n in logging.root.manager.loggerDict if n.startswith("rebound")]
    saved = {n: (list(lg.handlers), lg.level, lg.propagate) for n in names for lg in [logging.getLogger(n)]}
    yield
    for name in [n for n in logging.root.manager.loggerDict if n.startswith("rebound")]:
        logger = logging.getLogger(name)
        # A Powertools logger made during the test keeps its own handler: a later Logger of the
        # same service finds the logger marked as set up and reads that handler.
        own = logger.handlers[:1] if name not in saved and getattr(logger, "powertools_handler", None) else []
        for handler in logger.handlers:
            if handler not in own and (name not in saved or handler not in saved[name][0]):
                handler.close()
        logger.handlers, logger.level, logger.propagate = saved.get(name, (own, logging.NOTSET, True))


@pytest.mark.usefixtures("loggers_restored")
def test_the_local_log_file_names_the_function_that_wrote_each_engine_line(tmp_path: Path) -> None:
    """Every function shares the engine's loggers in the local cloud's process; each line still
    says which function wrote it, with that invocation's keys, as its own process would on Lambda."""
    executor = logger_for("executor")
    logger_for("sweeper")  # its function's logger, and so its format, exists
    path = tmp_path / "handlers.log"
    route_logs(None)  # a first stack in this process
    route_logs(path)  # a second stack in the process formats with the functions' own formatters still
    engine = logging.getLogger("rebound.engine.executor")
    routed = engine.handlers[0]
    assert isinstance(routed, Routed) and isinstance(routed.target.formatter, ByFunction)
    assert routed.target.formatter.by_service["rebound-executor"] is executor.registered_formatter
    # A function's logger made again after that still appends its keys to its own format.
    assert logger_for("executor").registered_formatter is executor.registered_formatter
    executor.append_keys(function_request_id="req-executor")
    try:
        with working_for(_in("executor")):
            engine.info("attempt finished")
        with working_for(_in("sweeper")):
            engine.info("lease expired")
    finally:
        executor.remove_keys(["function_request_id"])
    for handler in engine.handlers:
        handler.flush()
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(line["message"], line["service"]) for line in lines] == [
        ("attempt finished", "rebound-executor"),
        ("lease expired", "rebound-sweeper"),
    ]
    assert lines[0]["function_request_id"] == "req-executor"
    assert lines[1].get("function_request_id") != "req-executor"  # the sweeper's own keys, if any


def test_a_handler_s_lines_carry_its_request_id_but_not_the_keys_its_log_group_says() -> None:
    from types import SimpleNamespace

    from rebound.handlers.observability import REDUNDANT_KEYS, invocation_keys

    logger = logger_for("executor")
    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(logger.registered_formatter.format(record))

    context = SimpleNamespace(
        function_name="rebound-prod-ExecutorFunction3F7C1B2A-AbCdEfGh1234",
        memory_limit_in_mb=512,
        invoked_function_arn="arn:aws:lambda:us-east-1:123456789012:function:rebound-prod-Executor",
        aws_request_id="0f2b9a5e-3c1d-4e8b-9a7f-1b2c3d4e5f60",
    )

    @invocation_keys(logger)
    def handler(event: object, context: object) -> str:
        logging.getLogger("rebound.engine.executor").info("attempt finished", extra={"run_id": "r1"})
        return "done"

    engine = logging.getLogger("rebound.engine.executor")
    keep, level = Keep(), engine.level
    engine.addHandler(keep)
    engine.setLevel(logging.INFO)
    try:
        assert handler({}, context) == "done" and handler({}, context) == "done"
    finally:
        engine.removeHandler(keep)
        engine.setLevel(level)
    first, second = (json.loads(line) for line in lines)
    assert first["function_request_id"] == context.aws_request_id and first["run_id"] == "r1"
    assert first["service"] == "rebound-executor" and second["cold_start"] is False  # once per process
    assert not set(REDUNDANT_KEYS) & (set(first) | set(second))
