"""``rebound local``: run Rebound on this machine against an embedded AWS stand-in."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click

from rebound_cli.authz import local_only


@click.group()
def local() -> None:
    """Run Rebound on this machine, against moto in server mode on 127.0.0.1.

    \b
    Examples:
      rebound local demo                              # the whole loop, in seconds
      rebound local up                                # then: rebound --env local health
      rebound local simulate scenarios/faults-2h.yaml --report out/faults.json
    """


@local.command()
@local_only
def demo() -> None:
    """Run the demo: three tasks through the retry loop, 36 minutes of schedule time in seconds.

    \b
    Example:
      rebound local demo
    """
    from rebound_local.demo import run_demo

    run_demo()


@local.command()
@click.option(
    "--port", type=click.IntRange(0, 65535), default=4577, show_default=True, help="0 picks a free port"
)
@click.option(
    "--time-scale",
    type=click.FloatRange(min=0.001, max=100_000),
    default=1.0,
    show_default=True,
    help="schedule seconds per wall second (60: a minute per second)",
)
@click.option(
    "--state-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="keep tasks, runs, queues, schedules and work orders here across restarts",
)
@click.option("--no-view", is_flag=True, help="plain log lines instead of the live dashboard")
@click.option(
    "--env", "environment", default="local", show_default=True, help="environment name of the resources"
)
@click.option(
    "--faults",
    "faults_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="YAML with faults: (as in a scenario file; model: optional): a hostile cloud for every client",
)
@click.option(
    "--console-port",
    type=click.IntRange(0, 65535),
    default=8765,
    show_default=True,
    help="the ops console on 127.0.0.1 (0: a free port; a taken port falls back to a free one)",
)
@click.option("--no-console", is_flag=True, help="do not serve the ops console")
@local_only
def up(
    port: int,
    time_scale: float,
    state_dir: Path | None,
    no_view: bool,
    environment: str,
    faults_file: Path | None,
    console_port: int,
    no_console: bool,
) -> None:
    """Start the AWS stand-in with Rebound running in it, and the ops console, until Ctrl-C.

    Any AWS client can use the printed endpoint (region us-east-1, any credentials). With
    --faults, every client meets the faults the file names (throttling, transaction conflicts,
    index lag, latest-only receipt handles; the runtime's own crashes, timeouts and retries).

    \b
    Examples:
      rebound local up
      rebound local up --time-scale 60 --state-dir .local-state/up
      rebound local up --port 0 --no-view
      rebound local up --faults config/local/hostile-faults.yaml
    """
    from rebound.domain.errors import ConfigError
    from rebound_local.up import UpOptions, run_up

    try:
        code = run_up(
            UpOptions(
                port=port,
                time_scale=time_scale,
                state_dir=state_dir,
                view=not no_view,
                environment=environment,
                faults_file=faults_file,
                console_port=None if no_console else console_port,
            )
        )
    except ConfigError as exc:
        click.echo(f"error: {exc.message}", err=True)
        sys.exit(2)
    sys.exit(code)


@local.command()
@click.argument("scenario_file", metavar="SCENARIO.yaml", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--report",
    "report_path",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="where to write the JSON report",
)
@click.option("--seed", type=int, default=None, help="overrides the scenario's seed")
@click.option(
    "--transport",
    type=click.Choice(["direct", "inproc", "http"]),
    default="direct",
    show_default=True,
    help="how the handlers reach the stand-in",
)
@click.option("--quiet", is_flag=True, help="no progress, only the verdict")
@click.option(
    "--compare-budgets",
    is_flag=True,
    help="run it again with every retry budget per target off, and show both side by side",
)
@local_only
def simulate(
    scenario_file: Path,
    report_path: Path,
    seed: int | None,
    transport: str,
    quiet: bool,
    compare_budgets: bool,
) -> None:
    """Run a scenario under the virtual clock; exit 0 iff every invariant held.

    \b
    Examples:
      rebound local simulate scenarios/day-100-tasks.yaml --report out/day.json
      rebound local simulate scenarios/faults-2h.yaml --report out/faults.json --seed 9
      rebound local simulate scenarios/target-outage.yaml --report out/outage.json --compare-budgets
    """
    from rebound.domain.errors import ConfigError
    from rebound_local.simulate import run_simulate

    try:
        code = run_simulate(
            scenario_file,
            report_path,
            seed=seed,
            transport=transport,
            quiet=quiet,
            compare_budgets=compare_budgets,
        )
    except ConfigError as exc:
        click.echo(f"error: {exc.message}", err=True)
        sys.exit(2)
    out, err = sys.__stdout__, sys.__stderr__
    if sys.stdout is not out or out is None or err is None:  # embedded (e.g. CliRunner): exit politely
        sys.exit(code)
    # The report is written and printed. Tearing down a day's worth of in-memory AWS state
    # object by object takes seconds and achieves nothing, so leave without it.
    out.flush()
    err.flush()
    os._exit(code)


@local.command()
@click.option(
    "--template",
    "template_file",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    default=None,
    help="a synthesized template, its code asset beside it (default: synthesize --env as make synth does)",
)
@click.option(
    "--env",
    "environment",
    default=None,
    help="the environment to synthesize, or the template's (default: dev, or the template's Rebound-<env>)",
)
@click.option(
    "--scenario",
    "scenario_file",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    default=None,
    help="a scenario file (default: scenarios/rehearsal-smoke.yaml)",
)
@click.option(
    "--report",
    "report_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="where to write the JSON report",
)
@local_only
def rehearse(
    template_file: Path | None, environment: str | None, scenario_file: Path | None, report_path: Path | None
) -> None:
    """Deploy a synthesized stack to the local cloud and run a scenario on it, as AWS would.

    Resources come from the template; each function runs from its code asset and a layer built
    from the same pins, in its own interpreter with only the template's environment, and every
    AWS call it makes is checked against its role in the template. Exit 0 iff no call was denied,
    no invocation failed, every function ran and every invariant held; 1 otherwise.

    \b
    Examples:
      rebound local rehearse
      rebound local rehearse --template cdk.out/Rebound-staging.template.json --report out/rehearsal.json
    """
    from rebound_local.rehearse.run import print_summary
    from rebound_local.rehearse.run import rehearse as run_rehearsal
    from rebound_local.rehearse.template import TemplateError

    if environment is None:
        stem = template_file.name.removesuffix(".template.json") if template_file else ""
        environment = stem.removeprefix("Rebound-") if stem.startswith("Rebound-") else "dev"
    try:
        result = run_rehearsal(template_file, scenario_file, environment=environment)
    except TemplateError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    if report_path is not None:
        report_path.parent.mkdir(parents=True, exist_ok=True)
        report_path.write_text(json.dumps(result.report, indent=1, default=str) + "\n", encoding="utf-8")
    print_summary(result, click.echo)
    sys.exit(0 if result.ok else 1)
