"""What each command needs, declared on the command: ``@authorized(action, owner)``.

The rule (``rebound.ops.authz``) is decided before the command's code runs, with the command's
own arguments, the same way the ops API decides a route's: an object of a tenant the operator
lacks answers as one that does not exist (exit 4), a list shows only the operator's tenants, and
what every tenant shares is changed by administrators only (exit 7). A command that reaches no
environment (``rebound local ...``) says so with ``@local_only``. The generated test
(``tests/integration/test_authorization_generated.py``) fails on a command with neither.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import click

from rebound.ops.authz import Owner, Public, Rule, rule
from rebound_cli.output import GRAPHS

F = TypeVar("F", bound=Callable[..., Any])

RULE_ATTRIBUTE = "rebound_rule"
DRAWS_GRAPH = "rebound_draws_graph"
"""Set on a command that takes ``--output dot|mermaid`` (``draws_graph``); every other refuses them."""
LOCAL = Rule("local", Public("nobody: it runs on this machine only"))
"""The rule of a command that reaches no Rebound environment (it runs on this machine)."""


def authorized(action: str, owner: Owner | None = None) -> Callable[[F], F]:
    """Decide ``action`` on the tenant ``owner`` finds (a list, without one) before the command
    runs. Place it under ``@click.pass_obj``: the command's first argument is the ``App``."""
    declared = rule(action, owner)

    def decorate(command: F) -> F:
        @functools.wraps(command)
        def decided(app: Any, /, *args: Any, **kwargs: Any) -> Any:
            if app.output in GRAPHS and not getattr(command, DRAWS_GRAPH, False):
                raise click.UsageError(
                    f"--output {app.output} draws a graph: only `workstreams show` takes it"
                )
            app.decide(declared, kwargs)
            return command(app, *args, **kwargs)

        setattr(decided, RULE_ATTRIBUTE, declared)
        return decided  # type: ignore[return-value]

    return decorate


def draws_graph(command: F) -> F:
    """Declare that ``command`` takes ``--output dot|mermaid``; place it under ``@authorized``."""
    setattr(command, DRAWS_GRAPH, True)
    return command


def local_only(command: F) -> F:
    """Declare that ``command`` reaches no Rebound environment: nobody is asked."""
    setattr(command, RULE_ATTRIBUTE, LOCAL)
    return command


def rule_of(callback: Callable[..., Any] | None) -> Rule | None:
    """The rule a command's callback declares (through click's wrappers), if any."""
    return getattr(callback, RULE_ATTRIBUTE, None) if callback is not None else None
