"""Synthesize every environment once per test session, with cdk-nag on, into a temporary folder.

Synthesis fails if cdk-nag has an unacknowledged finding, so every test here stands on a stack
that passed the nag gate. Templates are read from the cloud assembly; the stack objects give the
logical id of each resource built from ``rebound.resources.SPEC``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from infra_helpers import ENVIRONMENTS, Synth

os.environ.setdefault("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "1")
os.environ.setdefault("JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION", "1")


@pytest.fixture(scope="session")
def synth(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Synth]:
    from rebound_infra.app import build_app

    outdir = tmp_path_factory.mktemp("cdk.out")
    app, stacks = build_app(list(ENVIRONMENTS), outdir=str(outdir))
    assembly = app.synth()
    templates = {
        env: json.loads((Path(assembly.directory) / f"{stack.stack_name}.template.json").read_text())
        for env, stack in stacks.items()
    }
    yield Synth(app, stacks, outdir, templates)


@pytest.fixture(params=ENVIRONMENTS)
def env(request: pytest.FixtureRequest) -> str:
    return str(request.param)
