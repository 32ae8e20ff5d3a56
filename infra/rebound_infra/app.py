"""Build the CDK app: one ``ReboundStack`` per environment, checked by cdk-nag.

``infra/app.py`` runs this (``make synth``, and ``npx aws-cdk@2 synth`` through ``cdk.json``).
Without ``--context env=NAME`` it synthesizes every environment in ``config/environments``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from aws_cdk import App, Validations
from cdk_nag import AwsSolutionsChecks

from rebound_infra.bundling import Sources, build_assets
from rebound_infra.config import environment_names, load_environment
from rebound_infra.stack import ReboundStack

REPO_ROOT = Path(__file__).resolve().parents[2]
ENV_CONTEXT = "env"
ENVIRONMENTS_DIR_CONTEXT = "rebound:environments-dir"


def cdk_json_context(root: Path = REPO_ROOT) -> dict[str, Any]:
    """``cdk.json``'s context: the defaults when the app runs without the CDK CLI."""
    path = root / "cdk.json"
    if not path.is_file():
        return {}
    context = json.loads(path.read_text(encoding="utf-8")).get("context", {})
    return dict(context) if isinstance(context, dict) else {}


def build_app(
    environments: Sequence[str] | None = None,
    *,
    outdir: str | None = None,
    context: Mapping[str, Any] | None = None,
    root: Path = REPO_ROOT,
    nag: bool = True,
) -> tuple[App, dict[str, ReboundStack]]:
    """The app and its stacks by environment. ``environments`` wins over the ``env`` context."""
    app = App(outdir=outdir, context={**cdk_json_context(root), **(context or {})})
    directory = root / str(app.node.try_get_context(ENVIRONMENTS_DIR_CONTEXT) or "config/environments")
    if environments is None:
        selected = app.node.try_get_context(ENV_CONTEXT)
        environments = [str(selected)] if selected else environment_names(directory)
    configs = [load_environment(name, directory) for name in environments]
    assets = build_assets(Sources(root))
    stacks = {config.name: ReboundStack(app, config, assets) for config in configs}
    if nag:
        Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return app, stacks
