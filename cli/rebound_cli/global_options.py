"""The root's options (``--env``, ``-o/--output``, ``--debug``, ``--version``), accepted anywhere on
the command line, as the AWS CLI does: ``rebound dlq list --output json`` is
``rebound --output json dlq list``.

Each option is declared once here. The root takes it as usual (``root_options``);
``install_everywhere`` also declares it, hidden, on every group and command below the root,
with a callback that sets the value on the ``App`` the root made (click runs a group's callback
before it parses its subcommand's arguments, so the ``App`` exists by then). A subcommand that
declares an option of the same name itself keeps it: ``rebound local up --env`` is ``local up``'s
own. Giving an option twice with different values is a usage error naming both values; with the
same value it is harmless. Only values given on the command line count: ``REBOUND_ENV`` is the
root's default, and ``--env`` anywhere overrides it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import click
from click.core import ParameterSource

from rebound_cli.context import App
from rebound_cli.output import FORMATS, GRAPHS

F = TypeVar("F", bound=Callable[..., Any])
_GIVEN = "rebound.global_options"
_PREFIX = "global_"
VERSION = {"package_name": "rebound", "prog_name": "rebound"}


@dataclass(frozen=True)
class GlobalOption:
    name: str
    """The root's parameter and the ``App`` attribute it sets."""
    decls: tuple[str, ...]
    options: dict[str, Any] = field(default_factory=dict)
    """What the option is, everywhere (type, flag, help)."""
    root_only: dict[str, Any] = field(default_factory=dict)
    """Defaults and environment variables: only the root has them."""


GLOBALS = (
    GlobalOption(
        "env",
        ("--env",),
        {"help": "the environment to operate on (REBOUND_ENV); `local` for `rebound local up`"},
        {"envvar": "REBOUND_ENV", "default": "dev", "show_default": True},
    ),
    GlobalOption(
        "output",
        ("-o", "--output"),
        {
            "type": click.Choice([*FORMATS, *GRAPHS]),
            "help": "table (default on a terminal), text (tab-separated, default otherwise), json (one "
            "stable document, keys sorted), yaml; dot or mermaid where a graph is drawn",
        },
    ),
    GlobalOption(
        "query",
        ("--query",),
        {"metavar": "JMESPATH", "help": "a JMESPath expression over the JSON output, as the AWS CLI's"},
    ),
    GlobalOption("profile", ("--profile",), {"help": "the AWS profile to use (instead of AWS_PROFILE)"}),
    GlobalOption("region", ("--region",), {"help": "the AWS region (instead of AWS_REGION)"}),
    GlobalOption("debug", ("--debug",), {"is_flag": True, "help": "print the traceback of an error"}),
)
EPILOG = "Global options ({}) may be given here too, as anywhere on the command line."


def root_options(fn: F) -> F:
    """Declare the global options on the root command."""
    for option in reversed(GLOBALS):
        fn = click.option(*option.decls, option.name, **option.options, **option.root_only)(fn)
    return click.version_option(**VERSION)(fn)


def install_everywhere(root: click.Group) -> None:
    """Declare the global options, hidden, on every group and command below ``root``."""
    for command in _below(root):
        taken = {opt for param in command.params for opt in param.opts + param.secondary_opts}
        added: list[str] = []
        for option in GLOBALS:
            if option.decls[-1] in taken:
                continue  # the command's own option of that name
            decls = [d for d in option.decls if d not in taken]
            command.params.append(
                click.Option(
                    [*decls, _PREFIX + option.name],
                    **option.options,
                    hidden=True,
                    expose_value=False,
                    callback=_apply,
                )
            )
            added.append("/".join(decls))
        if "--version" not in taken:
            click.version_option(**VERSION, hidden=True)(command)
            added.append("--version")
        epilog = EPILOG.format(", ".join(added))
        if added and epilog not in (command.epilog or ""):
            command.epilog = f"{command.epilog}\n\n{epilog}" if command.epilog else epilog


def _below(group: click.Group) -> list[click.Command]:
    found: list[click.Command] = []
    for command in group.commands.values():
        found.append(command)
        if isinstance(command, click.Group):
            found += _below(command)
    return found


def _apply(ctx: click.Context, param: click.Parameter, value: Any) -> None:
    """A global option given after the root: check it against earlier ones, and set it on the App."""
    assert param.name is not None
    if ctx.get_parameter_source(param.name) is not ParameterSource.COMMANDLINE:
        return
    name = param.name.removeprefix(_PREFIX)
    root = ctx.find_root()
    given: dict[str, tuple[Any, str]] = root.meta.setdefault(_GIVEN, {})
    if name not in given and root.get_parameter_source(name) is ParameterSource.COMMANDLINE:
        given[name] = (root.params[name], root.command_path)
    before = given.get(name)
    if before is not None and before[0] != value:
        option = "/".join(next(o.decls for o in GLOBALS if o.name == name))
        raise click.UsageError(
            f"{option} is given twice with different values: {before[0]!r} (after '{before[1]}') "
            f"and {value!r} (after '{ctx.command_path}'); give it once",
            ctx,
        )
    given[name] = (value, ctx.command_path)
    app = ctx.find_object(App)
    if app is not None:
        setattr(app, name, value)
