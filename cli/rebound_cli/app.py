"""The ``rebound`` command: the operator CLI and the local cloud."""

from __future__ import annotations

import contextlib
import os
import sys
import traceback
from typing import IO, Any

import click

from rebound_cli.commands.approvals import approvals
from rebound_cli.commands.audit import audit
from rebound_cli.commands.console import console
from rebound_cli.commands.dlq import dlq
from rebound_cli.commands.flags import flags
from rebound_cli.commands.health import health
from rebound_cli.commands.notifications import notifications
from rebound_cli.commands.policies import policies
from rebound_cli.commands.runs import runs
from rebound_cli.commands.sla import sla
from rebound_cli.commands.slo import slo
from rebound_cli.commands.state import state
from rebound_cli.commands.targets import targets
from rebound_cli.commands.tasks import tasks
from rebound_cli.commands.tenancy import migrate, tenants
from rebound_cli.commands.workorders import workorders
from rebound_cli.commands.workstreams import resources, workstreams
from rebound_cli.completion import completion, install_completion
from rebound_cli.context import App, Overrides
from rebound_cli.errors import describe
from rebound_cli.global_options import install_everywhere, root_options
from rebound_cli.local import local


class OneLineUsageError(click.UsageError):
    """A click usage error (missing option, bad value, unknown command) shown as one line.

    ``error: <the problem> (see '<command> --help')`` on stderr, exit code 2 as click's own.
    """

    def __init__(self, original: click.UsageError) -> None:
        super().__init__(original.format_message(), original.ctx)

    def show(self, file: IO[Any] | None = None) -> None:
        message = " ".join(self.format_message().split()).rstrip(".")
        if len(message) > 1 and message[0].isupper() and message[1].islower():
            message = message[0].lower() + message[1:]
        hint = f" (see '{self.ctx.command_path} --help')" if self.ctx is not None else ""
        click.echo(f"error: {message}{hint}", file=file, err=file is None)


def _one_line(exc: click.UsageError) -> click.UsageError:
    # The no-arguments help of a group is a usage error too, but its text is the help: keep it.
    if isinstance(exc, (OneLineUsageError, click.exceptions.NoArgsIsHelpError)):
        return exc
    return OneLineUsageError(exc)


class ReboundGroup(click.Group):
    """Turns every error a command raises into one line on stderr and an exit code (``errors``).

    Usage errors are one line too: the root's own options here (``make_context``), every
    subcommand's in ``invoke``, where their arguments are parsed.
    """

    def make_context(
        self, info_name: str | None, args: list[str], parent: click.Context | None = None, **extra: Any
    ) -> click.Context:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.UsageError as exc:
            raise _one_line(exc) from exc

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:
            raise _one_line(exc) from exc
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
            raise
        except BrokenPipeError:
            # The reader went away (`rebound runs list | head`): what it wanted, it has. Say
            # nothing, and keep Python from complaining while it flushes stdout at exit.
            with contextlib.suppress(OSError, ValueError):  # no file descriptor: nothing to flush
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            ctx.exit(0)
        except Exception as exc:
            line, code = describe(exc)
            click.echo(line, err=True)
            app = ctx.obj if isinstance(ctx.obj, App) else None
            if app is not None and app.debug:
                click.echo("".join(traceback.format_exception(exc)), err=True)
            ctx.exit(code)


@click.group(
    cls=ReboundGroup,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@root_options
@click.pass_context
def cli(
    ctx: click.Context,
    env: str,
    output: str | None,
    query: str | None,
    profile: str | None,
    region: str | None,
    debug: bool,
) -> None:
    """Rebound: scheduled and event-triggered tasks that are retried, dead-lettered and recovered.

    Resources are found from the environment's SSM parameter /rebound/ENV/resources. AWS access
    follows --profile (or AWS_PROFILE), --region (or AWS_REGION) and AWS_ENDPOINT_URL. Every
    change you make is audited with your AWS identity (sts:GetCallerIdentity) as the actor. Exit
    codes: 0 done, 1 failed, 2 bad input, 3 unhealthy, 4 not found, 5 conflict, 6 AWS unavailable
    or throttling, 7 refused (your identity may not act on that tenant).

    The options below may be given anywhere on the command line, as with the AWS CLI:
    `rebound dlq list --output json` is `rebound --output json dlq list`.

    \b
    Examples:
      rebound local demo                          # the whole loop on this machine
      rebound local up                            # a local AWS stand-in with Rebound running in it
      rebound --env local dlq list                # against `rebound local up` (with AWS_ENDPOINT_URL)
      rebound --env prod health --json
      rebound dlq list --env prod -o json         # global options after the command work too
      rebound --env prod runs show export-ledger:20260307T090500Z
      rebound tasks list --query "[?state=='paused'].id" -o text   # JMESPath, as the AWS CLI
    """
    overrides = ctx.obj if isinstance(ctx.obj, Overrides) else None
    ctx.obj = App(env, output, debug, overrides)
    ctx.obj.query, ctx.obj.profile, ctx.obj.region = query, profile, region


for group in (
    tasks,
    runs,
    dlq,
    workorders,
    workstreams,
    resources,
    notifications,
    policies,
    flags,
    approvals,
    targets,
    health,
    slo,
    sla,
    audit,
    tenants,
    migrate,
    state,
    console,
    local,
    completion,
):
    cli.add_command(group)
install_everywhere(cli)
install_completion(cli)


if __name__ == "__main__":
    sys.exit(cli())
