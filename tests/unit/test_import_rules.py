"""The layers' import rules, read from the source (every import, function-local ones included).

- ``domain`` imports nothing of Rebound outside itself;
- ``engine`` imports no adapter and no AWS SDK;
- ``ops`` imports no adapter and no AWS SDK: it reaches AWS through the ports in ``Deps``;
- only ``handlers`` import ``wiring`` (the composition root);
- no layer imports one above it (``LAYERS_BELOW``), and the adapters reach the engine through its
  ports only.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "functions" / "rebound"
AWS_SDK = ("boto3", "botocore", "mypy_boto3")


def imports_of(path: Path) -> list[str]:
    """Every module ``path`` imports, as absolute dotted names."""
    tree = ast.parse(path.read_text(), str(path))
    package = ".".join(("rebound", *path.relative_to(PACKAGE).with_suffix("").parts[:-1]))
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            found.append(module)
            found.extend(f"{module}.{alias.name}" for alias in node.names)
    return found


def modules(layer: str) -> list[Path]:
    return sorted((PACKAGE / layer).rglob("*.py"))


def within(name: str, *prefixes: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def violations(layer: str, forbidden: tuple[str, ...]) -> list[str]:
    return [
        f"{path.relative_to(PACKAGE)} imports {name}"
        for path in modules(layer)
        for name in imports_of(path)
        if within(name, *forbidden)
    ]


def test_the_rules_read_real_imports() -> None:
    # The checker itself: it sees a top-level and a function-local import, and resolves relative ones.
    ports = imports_of(PACKAGE / "engine" / "deps.py")
    assert "rebound.engine.ports" in ports
    assert any(within(name, "rebound.adapters") for name in imports_of(PACKAGE / "wiring.py"))
    assert modules("domain") and modules("engine") and modules("ops") and modules("handlers")


def test_domain_imports_nothing_of_rebound_outside_itself() -> None:
    outside = [
        f"{path.relative_to(PACKAGE)} imports {name}"
        for path in modules("domain")
        for name in imports_of(path)
        if within(name, "rebound") and not within(name, "rebound.domain")
    ]
    assert outside == []


@pytest.mark.parametrize("layer", ["engine", "ops"])
def test_engine_and_ops_import_no_adapter_and_no_aws_sdk(layer: str) -> None:
    assert violations(layer, ("rebound.adapters", "rebound.wiring", *AWS_SDK)) == []


def test_only_handlers_import_the_wiring() -> None:
    importers = sorted(
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if any(within(name, "rebound.wiring") for name in imports_of(path))
    )
    assert importers and all(p.startswith("handlers/") for p in importers), importers


def test_the_engine_reaches_targets_through_their_port_only() -> None:
    """The target types the engine sees are a port (``engine/ports/targets.py``); the invokers and
    their dispatcher are adapters, which import no operator code."""
    assert violations("engine", ("rebound.adapters.targets",)) == []
    assert violations("adapters", ("rebound.ops", "rebound.handlers")) == []
    assert not list((PACKAGE / "targets").glob("*.py")), "targets/ is gone: a port and adapters, not a layer"


LAYERS_BELOW = {
    "engine": ("rebound.ops", "rebound.api", "rebound.handlers"),
    "ops": ("rebound.api", "rebound.handlers"),
    "adapters": ("rebound.ops", "rebound.api", "rebound.handlers"),
    "domain": ("rebound.engine", "rebound.ops", "rebound.adapters", "rebound.api", "rebound.handlers"),
}
"""What each layer may not import: no arrow between folders runs back up."""


@pytest.mark.parametrize("layer", sorted(LAYERS_BELOW))
def test_no_layer_imports_a_layer_above_it(layer: str) -> None:
    assert violations(layer, LAYERS_BELOW[layer]) == []


def test_adapters_reach_the_engine_through_its_ports_only() -> None:
    inward = [
        f"{path.relative_to(PACKAGE)} imports {name}"
        for path in modules("adapters")
        for name in imports_of(path)
        if within(name, "rebound.engine") and not within(name, "rebound.engine.ports")
    ]
    assert inward == []


MAX_LINES = 600
"""A module a newcomer can hold in their head."""


def test_no_module_is_over_600_lines() -> None:
    root = PACKAGE.parents[1]
    trees = [root / "functions", root / "cli", root / "localcloud", root / "infra"]
    big = [
        f"{path.relative_to(root)} ({n} lines)"
        for tree in trees
        for path in sorted(tree.rglob("*.py"))
        if "build" not in path.parts and (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    ]
    assert big == []


def test_a_redrive_pass_does_not_call_back_into_the_operations_that_run_it() -> None:
    redrive = imports_of(PACKAGE / "ops" / "dlq" / "redrive.py")
    assert not [name for name in redrive if within(name, "rebound.ops.dlq.operations")]


def test_the_executor_is_one_pipeline_without_an_abstract_step_between_its_files() -> None:
    """intake builds on attempt, attempt on admission; no stage imports one built on it, and none
    declares a method another file must fill in."""
    executor = PACKAGE / "engine" / "executor"
    later = {
        "admission": ("attempt", "intake"),
        "attempt": ("intake",),
        "delivery": ("admission", "attempt", "intake"),
    }
    for stage, after in later.items():
        names = imports_of(executor / f"{stage}.py")
        assert not [n for n in names if any(within(n, f"rebound.engine.executor.{a}") for a in after)], stage
    for path in executor.glob("*.py"):
        assert "abstractmethod" not in path.read_text(encoding="utf-8"), path.name


def test_only_the_ops_api_handler_runs_operator_code() -> None:
    # ``ops/`` is what operators ask for. The functions that run on their own (executor, retry
    # scheduler, sweeper, escalation, outbox relay, ...) run engine code only; the ops API handler
    # serves operators, including the next chunk of a redrive job an operator started.
    reaching = [
        line
        for path in modules("handlers")
        if path.name != "ops_api.py"
        for line in (f"{path.relative_to(PACKAGE)} imports {n}" for n in imports_of(path))
        if line.split(" imports ")[1].startswith("rebound.ops")
    ]
    assert reaching == []
    assert any(within(n, "rebound.ops") for n in imports_of(PACKAGE / "handlers" / "ops_api.py"))
