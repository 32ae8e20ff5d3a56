"""Patch 18, SSM without EC2: moto's SSM models load moto's EC2 models only if they are used.

``moto.ssm.models`` imports ``moto.ec2`` at its top for one thing: the instances a Run Command
targets by tag. Importing moto's EC2 models builds every region's availability zones, reading
botocore's EC2 model and moto's instance-type files: 0.66 of the 0.97 s that importing moto's SSM
took, in every process that starts a local cloud (the local cloud keeps its parameters in SSM).
Rebound sends no Run Command. Here ``moto.ssm.models`` is imported with a stand-in for
``moto.ec2`` whose ``ec2_backends`` imports the real module at its first use, so a Run Command
still finds moto's EC2 as before (``tests/integration/test_motopatch.py``). If either module was
imported before, nothing changes.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any


class _EC2Backends:
    """``moto.ec2.ec2_backends``, imported when first used."""

    @staticmethod
    def _real() -> Any:
        return importlib.import_module("moto.ec2").ec2_backends

    def __getitem__(self, account_id: str) -> Any:
        return self._real()[account_id]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real(), name)


def _patch_ssm_import() -> None:
    if "moto.ssm.models" in sys.modules or "moto.ec2" in sys.modules:
        return
    stand_in = types.ModuleType("moto.ec2")
    stand_in.ec2_backends = _EC2Backends()  # type: ignore[attr-defined]
    sys.modules["moto.ec2"] = stand_in
    try:
        importlib.import_module("moto.ssm.models")
    finally:
        if sys.modules.get("moto.ec2") is stand_in:
            del sys.modules["moto.ec2"]
