"""Cold imports: each handler module against ``import boto3``, in fresh interpreters."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

HANDLERS = (
    "rebound.handlers.executor",
    "rebound.handlers.retry_scheduler",
    "rebound.handlers.escalation",
    "rebound.handlers.outbox_relay",
    "rebound.handlers.sweeper",
    "rebound.handlers.ops_api",
)


FIRST_CALL_FUNCTIONS = ("rebound.wiring", ("deps", "build_deps"))
"""Where a container's first invocation builds its dependencies: their imports are the first call's."""


def first_call_modules(module: str) -> list[str]:
    """The modules a handler's first invocation imports: those imported inside the handler
    module's functions and inside ``rebound.wiring``'s builders (read from their source)."""
    import ast
    import importlib.util

    def imported(name: str, functions: tuple[str, ...] | None) -> list[str]:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            raise ModuleNotFoundError(name)
        tree = ast.parse(Path(spec.origin).read_text())
        found: list[str] = []
        for top in tree.body:
            if not isinstance(top, ast.FunctionDef) or (functions and top.name not in functions):
                continue
            for node in ast.walk(top):
                if isinstance(node, ast.ImportFrom) and node.module:
                    found.append(node.module)
                elif isinstance(node, ast.Import):
                    found.extend(alias.name for alias in node.names)
        return found

    wiring, builders = FIRST_CALL_FUNCTIONS
    return list(dict.fromkeys([*imported(module, None), *imported(wiring, builders)]))


def _import_seconds(module: str, then: list[str] | None = None) -> float:
    """Seconds to import ``module`` (and then ``then``) in a fresh interpreter."""
    imports = "; ".join(f"import {name}" for name in [module, *(then or [])])
    code = f"import time; t = time.perf_counter(); {imports}; print(time.perf_counter() - t)"
    # As on Lambda: the bundle's own modules are compiled at import (no cached bytecode read or written).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPYCACHEPREFIX"} | {
        "PYTHONDONTWRITEBYTECODE": "1"
    }
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    return float(done.stdout.strip().splitlines()[-1])


def bench_imports(runs: int) -> dict[str, Any]:
    """Best of ``runs`` fresh interpreters for ``import boto3`` and each handler module; and,
    measured the same way, the module with everything its first invocation imports."""
    boto3_s = min(_import_seconds("boto3") for _ in range(runs))
    handlers = {}
    for module in HANDLERS:
        seconds = min(_import_seconds(module) for _ in range(runs))
        first = first_call_modules(module)
        with_first = min(_import_seconds(module, first) for _ in range(runs))
        handlers[module] = {
            "seconds": round(seconds, 4),
            "ratio": round(seconds / boto3_s, 3),
            "with_first_call_imports_seconds": round(with_first, 4),
            "with_first_call_imports_ratio": round(with_first / boto3_s, 3),
        }
    return {
        "runs": runs,
        "boto3_seconds": round(boto3_s, 4),
        "handlers": handlers,
        "worst_ratio": max(h["ratio"] for h in handlers.values()),
        "worst_with_first_call_ratio": max(h["with_first_call_imports_ratio"] for h in handlers.values()),
    }
