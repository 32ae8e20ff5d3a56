"""``rebound console``: the ops console in the browser, on 127.0.0.1, with your own AWS identity."""

from __future__ import annotations

import click

from rebound.ops.authz import Public
from rebound_cli.authz import authorized
from rebound_cli.context import App


@click.command()
@click.option(
    "--port", type=click.IntRange(0, 65535), default=8765, show_default=True, help="0 picks a free port"
)
@click.pass_obj
@authorized("console:serve", Public("nobody here: each request, by its route's rule"))
def console(app: App, port: int) -> None:
    """Serve the ops console on 127.0.0.1 until Ctrl-C; the first line printed is the URL to open.

    The URL carries a token made for this launch: without it every request is refused. The
    console calls the operations API in-process with your AWS credentials (AWS_PROFILE,
    AWS_REGION, AWS_ENDPOINT_URL, as every command), and every change it makes is audited with
    your identity (sts:GetCallerIdentity) as the actor. Nothing needs deploying.

    \b
    Examples:
      rebound --env prod console
      rebound --env local console --port 0      # against `rebound local up` (with its exports)
    """
    from rebound_cli.console import ConsoleServer

    server = ConsoleServer(lambda: app.deps, lambda: app.actor, port=port)
    click.echo(server.url)
    click.echo(f"Rebound console for environment {app.env!r}: open the URL above; Ctrl-C stops it.", err=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.httpd.server_close()
