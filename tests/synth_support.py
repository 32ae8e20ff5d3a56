"""Every environment's stack synthesized once per test session, shared by the test workers.

Synthesis runs CDK through jsii and takes seconds; the infrastructure gates, the ops API's rights
check and the rehearsal all read the same cloud assembly. The first worker to ask synthesizes it
(as ``make synth`` does, cdk-nag on) under a file lock in the session's shared temporary folder;
the others wait for it and read the same files.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from rebound_local.rehearse.template import synthesize_all

ENVIRONMENTS = ("dev", "staging", "prod")


def shared_assembly(
    tmp_path_factory: pytest.TempPathFactory, synthesize: Callable[[Path], None] | None = None
) -> Path:
    """The folder holding ``Rebound-<env>.template.json`` of every environment and its assets.
    ``synthesize(folder)`` makes it if this worker is the first to ask (by default in a
    subprocess, as ``make synth`` does)."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the session's folder, above each worker's own
    folder = base / "cdk-all-environments"
    with (base / "cdk-all-environments.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (folder / "synthesized").is_file():
            if synthesize is None:
                synthesize_all(ENVIRONMENTS, folder)
            else:
                synthesize(folder)
            (folder / "synthesized").write_text("")
    return folder
