"""The parent's side of a rehearsed function: one process per function (``host.py``), invoked as
Lambda would, with every call it made and how IAM decided it recorded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import IO, Any

from rebound_local.instrument import RecordingTargets, TargetCall
from rebound_local.invocations import SimulatedCrash
from rebound_local.rehearse.template import ACCOUNT, REGION, FunctionDeploy

HOST = Path(__file__).with_name("host.py")
ANSWER_MARGIN_S = 30.0


class FunctionFailed(RuntimeError):
    """An invocation raised (or its environment could not start): the runtime counts it failed."""


@dataclass(frozen=True)
class Denial:
    function: str
    action: str
    resource: str
    reason: str

    def line(self) -> str:
        return f"{self.function}: {self.action} on {self.resource} denied ({self.reason})"


@dataclass
class Ledger:
    """What every rehearsed function did."""

    calls: dict[str, Counter[str]] = field(default_factory=dict)
    """Function -> IAM action -> how many times it was authorized."""
    used: dict[str, set[tuple[str, str]]] = field(default_factory=dict)
    """Function -> every (action, resource) a call of it was allowed, indexes as their table."""
    denials: list[Denial] = field(default_factory=list)
    failures: list[dict[str, str]] = field(default_factory=list)
    """Invocations that raised: function, phase (init or invoke), error type, message."""
    invocations: Counter[str] = field(default_factory=Counter)
    crashes: Counter[str] = field(default_factory=Counter)
    """Invocations stopped at one of the scenario's crash points."""
    lock: threading.Lock = field(default_factory=threading.Lock)


class FunctionHost:
    def __init__(
        self,
        deployed: FunctionDeploy,
        path: list[str],
        endpoint_url: str,
        key_policies: dict[str, list[dict[str, Any]]],
        ledger: Ledger,
        targets: RecordingTargets | None,
        log: IO[str] | None,
        environment: dict[str, str] | None = None,
        crash: dict[str, Any] | None = None,
    ) -> None:
        """``crash``: the scenario's crash points (``points``, at most ``limit`` each), injected
        in the function's process."""
        self.deployed = deployed
        self.ledger = ledger
        self.targets = targets
        self._lock = threading.Lock()
        config = {
            "paths": path,
            "handler": deployed.handler,
            "role_arn": deployed.role_arn,
            "statements": list(deployed.statements),
            "key_policies": key_policies,
            "region": REGION,
            "account": ACCOUNT,
            "crash": crash or {},
        }
        handle, name = tempfile.mkstemp(prefix=f"rehearse-{deployed.logical}-", suffix=".json")
        with os.fdopen(handle, "w") as f:
            json.dump(config, f)
        self._config = Path(name)
        env = {
            **(environment if environment is not None else deployed.environment),
            "AWS_LAMBDA_FUNCTION_NAME": deployed.name,
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(deployed.memory_mb),
            "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
            "AWS_LAMBDA_LOG_GROUP_NAME": f"/aws/lambda/{deployed.name}",
            "AWS_EXECUTION_ENV": f"AWS_Lambda_{deployed.runtime}",
            "AWS_REGION": REGION,
            "AWS_DEFAULT_REGION": REGION,
            "AWS_ACCESS_KEY_ID": "ASIA" + deployed.logical.upper()[:16].ljust(16, "X"),
            "AWS_SECRET_ACCESS_KEY": "rehearsal",
            "AWS_SESSION_TOKEN": "rehearsal",
            "AWS_ENDPOINT_URL": endpoint_url,
            "LAMBDA_TASK_ROOT": path[0],
            "PATH": "/usr/bin:/bin",
            "LANG": "C.UTF-8",
            "TZ": ":UTC",
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        self.process = subprocess.Popen(
            [sys.executable, "-I", "-S", str(HOST), str(self._config)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log if log is not None else subprocess.DEVNULL,
            text=True,
            env=env,
        )

    def invoke(self, event: dict[str, Any], context: Any) -> Any:
        name = self.deployed.logical
        message = {
            "event": event,
            "now": context._clock.now().isoformat(),
            "remaining_ms": context.get_remaining_time_in_millis(),
            "request_id": getattr(context, "aws_request_id", str(uuid.uuid4())),
            "function_arn": self.deployed.arn,
        }
        with self._lock:
            assert self.process.stdin is not None and self.process.stdout is not None
            self.process.stdin.write(json.dumps(message, default=str) + "\n")
            self.process.stdin.flush()
            line = self.process.stdout.readline()
        if not line:
            raise FunctionFailed(f"{name}: its process ended (exit {self.process.poll()})")
        answer = json.loads(line)
        with self.ledger.lock:
            self.ledger.invocations[name] += 1
            counts = self.ledger.calls.setdefault(name, Counter())
            used = self.ledger.used.setdefault(name, set())
            for action, resource, allowed, reason in answer["calls"]:
                counts[action] += 1
                if allowed:
                    used.add((action, resource.split("/index/")[0]))
                else:
                    self.ledger.denials.append(Denial(name, action, resource, reason))
            if "crash" in answer:
                self.ledger.crashes[name] += 1
            elif not answer["ok"]:
                error = answer["error"]
                self.ledger.failures.append(
                    {
                        "function": name,
                        "phase": error["phase"],
                        "type": error["type"],
                        "message": error["message"][:500],
                    }
                )
        if self.targets is not None:
            for run_id, task_id, attempt, at, ok, code in answer["targets"]:
                with self.targets._lock:
                    self.targets.calls.append(
                        TargetCall(run_id, task_id, attempt, datetime.fromisoformat(at), ok, code)
                    )
        self._play(answer.get("async_starts") or [])
        if "crash" in answer:  # the runtime plays it as a crashed invocation: nothing acknowledged
            raise SimulatedCrash(answer["crash"])
        if not answer["ok"]:
            error = answer["error"]
            raise FunctionFailed(f"{name} ({error['phase']}): {error['type']}: {error['message']}")
        return answer["response"]

    def _play(self, starts: list[dict[str, Any]]) -> None:
        """Simulated asynchronous work the function started: played by the runtime's player."""
        if not starts or self.targets is None:
            return
        from rebound.domain.target_specs import SimAsync
        from rebound.engine.ports.targets import Invocation

        player = getattr(self.targets.invokers.get("sim"), "workers", None)
        for start in starts:
            call = dict(start["call"])
            for key in ("scheduled_for", "deadline"):
                call[key] = datetime.fromisoformat(call[key])
            if player is not None:
                player.start(Invocation(**call), SimAsync.model_validate(start["behavior"]), start["token"])

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._config.unlink(missing_ok=True)
