#!/usr/bin/env python3
"""The CDK app's entry point: ``make synth``, or ``npx aws-cdk@2 synth --context env=dev``.

Synthesis makes no AWS calls and needs no Docker; the Lambda bundles are built into ``build/``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "1")
os.environ.setdefault("JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "functions"))

from rebound.domain.errors import ConfigError
from rebound_infra.app import build_app


def main() -> int:
    try:
        app, _ = build_app(outdir=None if os.environ.get("CDK_OUTDIR") else "cdk.out")
    except ConfigError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return 2
    app.synth()
    return 0


if __name__ == "__main__":
    sys.exit(main())
