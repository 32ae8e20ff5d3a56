"""A handler module's import leaves the engine, the adapters and boto3 to its first invocation.

This pins what is imported, not how long it takes (``make bench`` measures that): a module-level
import of the engine in a handler would put it back into every cold start's init.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from rebound_local.bench import HANDLERS, first_call_modules

# Powertools imports the botocore package itself (its __init__ only) to register its user agent.
DEFERRED = (
    "boto3",
    "botocore.session",
    "botocore.client",
    "pydantic",
    "yaml",
    "rebound.engine",
    "rebound.adapters",
    "rebound.api",
)


def modules_after_import(module: str) -> set[str]:
    code = f"import sys, json; import {module}; print(json.dumps(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(json.loads(done.stdout))


@pytest.mark.parametrize("handler", HANDLERS)
def test_a_handler_module_imports_no_engine_adapter_or_boto3(handler: str) -> None:
    loaded = modules_after_import(handler)

    eager = sorted(m for m in loaded if any(m == d or m.startswith(d + ".") for d in DEFERRED))

    assert eager == [], f"{handler} imports at module level: {eager[:10]}"


@pytest.mark.parametrize("handler", HANDLERS)
def test_what_the_first_invocation_imports_is_read_from_the_source(handler: str) -> None:
    first = first_call_modules(handler)

    # wiring builds the store and the clients for every handler; each handler adds its engine part
    assert "boto3" in first and "rebound.adapters.dynamo" in first
    assert any(m.startswith(("rebound.engine.", "rebound.api", "rebound.ops.")) for m in first)
