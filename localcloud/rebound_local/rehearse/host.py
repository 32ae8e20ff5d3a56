"""One function's process in a rehearsal: the Lambda runtime's part, around the deployed handler.

Run as ``python -I -S host.py CONFIG.json``: no site-packages, no development environment. Its
path is the code asset, the dependency layer and the runtime's boto3 (the config lists them, in
Lambda's order), and its environment only what the template gives the function plus the Lambda
runtime's own variables. It imports the handler as Lambda's init does, then serves invocations:
one JSON line in on stdin, one JSON line out on the descriptor named in the config (the handler's
stdout and stderr are its log).

The IAM check: every botocore call is first authorized against the function's role policy from
the template (``iam.py``, ``calls.py``, loaded from beside this file); a call it does not allow
fails with ``AccessDenied``, as on AWS, and every decision goes back with the invocation's answer.

The clock: the engine's clock is the one the local runtime runs on (``now`` comes with each
invocation), installed through ``rebound.wiring.build_deps``'s ``clock`` parameter, the seam the
local runtime and the tests use; everything else the function reads from its environment.
"""

from __future__ import annotations

import importlib
import importlib.util
import io
import json
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any


def _load(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(f"_rehearse_{name}", Path(__file__).with_name(f"{name}.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


class Clock:
    def __init__(self) -> None:
        self.base = datetime.now(UTC)
        self.mark = time.monotonic()

    def set(self, now: datetime) -> None:
        self.base, self.mark = now, time.monotonic()

    def now(self) -> datetime:
        return self.base + timedelta(seconds=time.monotonic() - self.mark)

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)

    def call_at(self, when: datetime, fn: Callable[[], object]) -> threading.Timer:
        timer = threading.Timer(max((when - self.now()).total_seconds(), 0.0), fn)
        timer.daemon = True
        timer.start()
        return timer


class InjectedCrash(BaseException):
    """The invocation stops here, as a process killed mid-invocation would (a scenario's crash)."""


class Crashes:
    """``rebound.engine.ports.CrashPoints``: the first ``limit`` visits of each named point crash."""

    def __init__(self, points: list[str], limit: int) -> None:
        self.left = dict.fromkeys(points, limit)

    def reached(self, point: str) -> None:
        if self.left.get(point, 0) > 0:
            self.left[point] -= 1
            raise InjectedCrash(point)


class ForwardedWork:
    """``rebound.adapters.targets.sim.SimWorkers``: each simulated asynchronous start goes back with the
    invocation's answer, for the local runtime's worker player to play on its clock."""

    def __init__(self) -> None:
        self.started: list[dict[str, Any]] = []

    def start(self, call: Any, behavior: Any, token: str) -> None:
        fields = {k: v.isoformat() if isinstance(v, datetime) else v for k, v in vars(call).items()}
        self.started.append({"call": fields, "behavior": behavior.model_dump(mode="json"), "token": token})


class Context:
    def __init__(self, message: dict[str, Any]) -> None:
        self.function_name = os.environ["AWS_LAMBDA_FUNCTION_NAME"]
        self.function_version = "$LATEST"
        self.invoked_function_arn = message["function_arn"]
        self.memory_limit_in_mb = int(os.environ["AWS_LAMBDA_FUNCTION_MEMORY_SIZE"])
        self.aws_request_id = message["request_id"]
        self.log_group_name = f"/aws/lambda/{self.function_name}"
        self.log_stream_name = "rehearsal"
        self._deadline = time.monotonic() + message["remaining_ms"] / 1000

    def get_remaining_time_in_millis(self) -> int:
        return max(int((self._deadline - time.monotonic()) * 1000), 0)


def main() -> int:
    config = json.loads(Path(sys.argv[1]).read_text())
    out = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)  # the handler's prints and logs go to the log, not into the answers
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), line_buffering=True)
    sys.path[:0] = config["paths"]
    iam, calls = _load("iam"), _load("calls")
    arns = calls.Arns(config["region"], config["account"])
    statements, key_policies, role = config["statements"], config["key_policies"], config["role_arn"]
    decisions: list[list[Any]] = []
    targets: list[list[Any]] = []
    clock = Clock()
    crash = config.get("crash") or {}
    crashes = Crashes(list(crash.get("points", [])), int(crash.get("limit", 1)))
    work = ForwardedWork()

    def authorize(service: str, operation: str, params: dict[str, Any]) -> None:
        for action, resource in calls.authorizations(service, operation, params, arns):
            if action.startswith("kms:") and resource in key_policies:
                decision = iam.evaluate_with_key_policy(
                    role, statements, key_policies[resource], action, resource
                )
            else:
                decision = iam.evaluate(statements, action, resource)
            decisions.append([action, resource, decision.allowed, decision.reason])
            if not decision.allowed:
                from botocore.exceptions import ClientError

                code = "AccessDenied" if service in ("sqs", "sns", "sts", "iam") else "AccessDeniedException"
                message = (
                    f"User: {role} is not authorized to perform: {action} on resource: {resource} "
                    f"({decision.reason})"
                )
                raise ClientError({"Error": {"Code": code, "Message": message}}, operation)

    handler: Any = None
    init_error: dict[str, Any] | None = None
    try:
        from botocore.client import BaseClient

        original = BaseClient._make_api_call  # type: ignore[attr-defined]

        def checked(self: Any, operation_name: str, api_params: dict[str, Any]) -> Any:
            authorize(self.meta.service_model.service_name, operation_name, api_params)
            return original(self, operation_name, api_params)

        BaseClient._make_api_call = checked  # type: ignore[attr-defined]
        module_name, _, attribute = config["handler"].rpartition(".")
        handler = getattr(importlib.import_module(module_name), attribute)
        wiring = importlib.import_module("rebound.wiring")
        build = wiring.build_deps

        def build_deps(settings: Any, **kwargs: Any) -> Any:
            kwargs.setdefault("clock", clock)
            kwargs.setdefault("faults", crashes)
            deps = build(settings, **kwargs)
            sim = deps.targets.invokers.get("sim")
            if sim is not None:
                sim.workers = work
            return deps

        wiring.build_deps = build_deps  # type: ignore[attr-defined]
        dispatch = importlib.import_module("rebound.adapters.targets.dispatch")
        invoke = dispatch.TargetDispatcher.invoke

        def recorded(self: Any, target: Any, call: Any) -> Any:
            started = clock.now()
            outcome = invoke(self, target, call)
            targets.append(
                [call.run_id, call.task_id, call.attempt, started.isoformat(), outcome.ok, outcome.error_code]
            )
            return outcome

        dispatch.TargetDispatcher.invoke = recorded
    except Exception as exc:  # Lambda's Runtime.ImportModuleError: every invocation fails
        init_error = {
            "type": type(exc).__name__,
            "message": str(exc),
            "traceback": traceback.format_exc(),
            "phase": "init",
        }

    for line in sys.stdin:
        message = json.loads(line)
        decisions.clear()
        targets.clear()
        work.started.clear()
        answer: dict[str, Any] = {"ok": False}
        if init_error is not None:
            answer["error"] = init_error
        else:
            clock.set(datetime.fromisoformat(message["now"]))
            try:
                response = handler(message["event"], Context(message))
                # Lambda's runtime serializes the response with the standard json module: what
                # it cannot serialize fails the invocation (Runtime.MarshalError).
                answer = {"ok": True, "response": json.loads(json.dumps(response))}
            except (TypeError, ValueError) as exc:
                answer = {
                    "ok": False,
                    "error": {
                        "type": "Runtime.MarshalError",
                        "message": f"Unable to marshal response: {exc}",
                        "traceback": traceback.format_exc(),
                        "phase": "invoke",
                    },
                }
            except InjectedCrash as crashed:
                answer = {"ok": False, "crash": str(crashed)}
            except Exception as exc:
                answer = {
                    "ok": False,
                    "error": {
                        "type": type(exc).__name__,
                        "message": str(exc),
                        "traceback": traceback.format_exc(),
                        "phase": "invoke",
                    },
                }
        answer["calls"] = decisions
        answer["targets"] = targets
        answer["async_starts"] = work.started
        out.write(json.dumps(answer, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
