"""Every environment synthesized once per test session, with cdk-nag on (``synth_support``).

Synthesis fails if cdk-nag has an unacknowledged finding, so every test here stands on a stack
that passed the nag gate. Templates are read from the shared cloud assembly; the stack objects,
built again here from the same code (without synthesizing), give the logical id of each resource
built from ``rebound.resources.SPEC`` and the constructs' metadata.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from infra_helpers import ENVIRONMENTS, Synth
from synth_support import shared_assembly

os.environ.setdefault("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "1")
os.environ.setdefault("JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION", "1")


@pytest.fixture(scope="session")
def synth(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Synth]:
    from rebound_infra.app import build_app

    built: list[tuple[Any, dict[str, Any]]] = []

    def synthesize(folder: Path) -> None:
        built.append(build_app(list(ENVIRONMENTS), outdir=str(folder)))
        built[0][0].synth()

    outdir = shared_assembly(tmp_path_factory, synthesize)
    if not built:  # another worker synthesized: the objects, built again without synthesizing
        built.append(build_app(list(ENVIRONMENTS), outdir=str(tmp_path_factory.mktemp("cdk.out"))))
    app, stacks = built[0]
    templates = {
        env: json.loads((outdir / f"{stack.stack_name}.template.json").read_text())
        for env, stack in stacks.items()
    }
    yield Synth(app, stacks, outdir, templates)


@pytest.fixture(params=ENVIRONMENTS)
def env(request: pytest.FixtureRequest) -> str:
    return str(request.param)
