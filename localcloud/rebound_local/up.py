"""``rebound local up``: the AWS stand-in with Rebound running in it, in real (or scaled) time.

- moto in server mode on 127.0.0.1, Rebound's resources provisioned from the same spec as the
  CDK stack, the runtime playing Scheduler, the event source mappings and the outbox relay;
- the clock is the wall clock times ``--time-scale`` (moto's clock follows it, so SQS delays and
  visibility timeouts scale too);
- with ``--state-dir``, state is restored before the runtime starts, saved every 30 s of wall
  time and on shutdown (``rebound_local.snapshot``);
- Ctrl-C (SIGINT) or SIGTERM: the runtime stops taking work, the invocations under way finish,
  the state is saved, the server stops; exit code 0.
"""

from __future__ import annotations

import json
import logging
import signal
import sys
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

from rich.console import Console
from rich.live import Live

from rebound import resources as r
from rebound_local import snapshot
from rebound_local.clock import ScaledClock
from rebound_local.heap import HeapKeeper
from rebound_local.provision import REGION
from rebound_local.scenario import load_faults_file
from rebound_local.stack import Faults, LocalStack, start_local
from rebound_local.view import Dashboard, PlainLog

log = logging.getLogger(__name__)


@dataclass
class UpOptions:
    port: int = 4577
    time_scale: float = 1.0
    state_dir: Path | None = None
    view: bool = True
    environment: str = "local"
    save_every_s: float = 30.0
    status_every_s: float = 10.0
    faults_file: Path | None = None
    """YAML with ``faults:`` (and optionally ``model:`` and ``seed:``): a hostile cloud for every client."""
    console_port: int | None = 8765
    """Where the ops console listens on 127.0.0.1 (0: a free port; None: no console)."""


class _Stop(Exception):
    """SIGTERM, handled like Ctrl-C."""


def usage(endpoint: str, environment: str, opts: UpOptions, faults: list[str] | None = None) -> str:
    state = f"state is kept in {opts.state_dir}" if opts.state_dir else "state is not kept (use --state-dir)"
    hostile = (
        [f"hostile mode ({opts.faults_file}):", *(f"  {line}" for line in faults)]
        if faults
        else ["faults: none (a kind cloud; --faults FILE for a hostile one)"]
    )
    return "\n".join(
        [
            f"endpoint {endpoint}  (region {REGION}, any credentials)",
            f"  aws --endpoint-url {endpoint} --region {REGION} sqs list-queues",
            f"  export AWS_ENDPOINT_URL={endpoint} AWS_DEFAULT_REGION={REGION} "
            "AWS_ACCESS_KEY_ID=local AWS_SECRET_ACCESS_KEY=local",
            f"  rebound --env {environment} tasks apply -f config/demo/tasks.yaml   (with the exports above)",
            f"  resource names: aws ssm get-parameter --name /rebound/{environment}/resources",
            f"time scale {opts.time_scale:g} (one wall second is {opts.time_scale:g} schedule seconds)",
            state,
            *hostile,
        ]
    )


def publish_clock(ssm: Any, environment: str, clock: ScaledClock) -> None:
    """Add the runtime's clock to the resources document, where the CLI, the console and any other
    process reads "now" from (at ``--time-scale`` 60, schedule time runs a minute per second)."""
    name = r.resources_parameter(environment)
    document = json.loads(ssm.get_parameter(Name=name)["Parameter"]["Value"])
    document["clock"] = clock.anchor()
    ssm.put_parameter(Name=name, Value=json.dumps(document), Type="String", Overwrite=True)


def run_up(opts: UpOptions, console: Console | None = None) -> int:
    console = console or Console()
    out = console if opts.view else Console(highlight=False, soft_wrap=True)
    wall = datetime.now(UTC)
    saved_at = snapshot.saved_time(opts.state_dir) if opts.state_dir else None
    # Time never runs backwards across a restart: a scaled clock may have run ahead of the wall.
    start = max(wall, saved_at) if saved_at else wall
    clock = ScaledClock(start, opts.time_scale)
    log_dir = opts.state_dir or Path(".local-state")
    log_dir.mkdir(parents=True, exist_ok=True)
    hostile: dict[str, Any] = {}
    if opts.faults_file is not None:
        chosen = load_faults_file(opts.faults_file)  # ConfigError: the CLI exits 2 before anything starts
        latency = chosen.model.latency()
        hostile = {
            # Throttled in moto's request handling: every client meets it, the handlers once.
            "faults": Faults.from_config(chosen.faults, chosen.seed, throttle_in_moto=True),
            "latency": latency if latency.active else None,
            "concurrency": chosen.model.concurrency,
            "executor_max_concurrency": chosen.model.executor_max_concurrency,
        }
    stack = start_local(
        clock,
        port=opts.port,
        environment=opts.environment,
        log_file=log_dir / "up-handlers.log",
        **hostile,
    )
    restored: dict[str, int] | None = None
    if opts.state_dir and saved_at is not None:
        restored = snapshot.restore(stack.cloud, opts.state_dir)
    publish_clock(stack.cloud.client("ssm"), opts.environment, clock)
    faults: list[str] | None = None
    if hostile:
        faults = hostile["faults"].describe()
        if hostile["concurrency"]:
            faults.append(f"concurrency: up to {hostile['concurrency']} invocations of each function at once")
        if hostile["executor_max_concurrency"]:
            faults.append(f"executor: at most {hostile['executor_max_concurrency']} batches at once")
    out.print(usage(stack.cloud.endpoint_url, opts.environment, opts, faults))
    if restored is not None:
        out.print(
            f"restored from {snapshot.state_file(opts.state_dir or Path())}: {restored['items']} items, "
            f"{restored['messages']} messages, {restored['schedules']} schedules "
            f"(taken at {saved_at:%Y-%m-%dT%H:%M:%SZ})"
        )
    out.print(f"handler logs: {log_dir / 'up-handlers.log'}")
    ops_console = _start_console(stack, opts.console_port)
    if ops_console is not None:
        out.print(f"console {ops_console.url}", highlight=False, soft_wrap=True)

    stop = threading.Event()
    worker = threading.Thread(target=stack.runtime.run_realtime, args=(stop,), name="runtime", daemon=True)
    heap = HeapKeeper().start()  # the stored items out of the collector's way (rebound_local.heap)
    worker.start()
    previous = signal.getsignal(signal.SIGTERM)
    try:
        signal.signal(signal.SIGTERM, _raise_stop)
        # Ctrl-C stops too, even when the process was started with SIGINT ignored (a shell without
        # job control ignores it in the background commands it starts), where Python installs no
        # handler. "ready" comes once both are in place: from then on either signal stops cleanly.
        signal.signal(signal.SIGINT, _raise_stop)
        out.print("ready", highlight=False)
        sys.stdout.flush()
        _watch(stack, opts, console, out)
    except (KeyboardInterrupt, _Stop):
        pass
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the save short
        signal.signal(signal.SIGTERM, previous)
        if ops_console is not None:
            ops_console.stop()
        _shut_down(stack, stop, worker, opts, out)
        heap.stop()
    return 0


def _start_console(stack: LocalStack, port: int | None) -> Any:
    """The ops console over the stack, as the local cloud's caller; a free port if ``port`` is taken."""
    if port is None:
        return None
    from rebound_cli.console import ConsoleServer

    def caller() -> str:
        return str(stack.cloud.client("sts").get_caller_identity()["Arn"])

    try:
        server = ConsoleServer(lambda: stack.deps, caller, port=port)
    except OSError:
        server = ConsoleServer(lambda: stack.deps, caller, port=0)
    return server.start()


def _raise_stop(signum: int, frame: FrameType | None) -> None:
    raise _Stop()


def _watch(stack: LocalStack, opts: UpOptions, console: Console, out: Console) -> None:
    last_save = time.monotonic()

    def maybe_save() -> None:
        nonlocal last_save
        if opts.state_dir and time.monotonic() - last_save >= opts.save_every_s:
            last_save = time.monotonic()
            snapshot.save(stack.cloud, stack.clock.now(), opts.state_dir)

    if opts.view and console.is_terminal:
        header = (
            f"endpoint [cyan]{stack.cloud.endpoint_url}[/cyan]  region {REGION}  "
            f"time scale {opts.time_scale:g}"
        )
        dashboard = Dashboard(stack, header)
        with Live(dashboard.render(), console=console, refresh_per_second=2, screen=False) as live:
            while True:
                time.sleep(1.0)
                live.update(dashboard.render())
                maybe_save()
    plain = PlainLog(stack, every_s=opts.status_every_s)
    for line in plain.lines(force_status=True):
        print(line, flush=True)
    while True:
        time.sleep(1.0)
        for line in plain.lines():
            print(line, flush=True)
        sys.stdout.flush()
        maybe_save()


def _shut_down(
    stack: LocalStack, stop: threading.Event, worker: threading.Thread, opts: UpOptions, out: Console
) -> None:
    out.print("stopping: letting the invocations under way finish...")
    stop.set()
    worker.join(timeout=30)
    stack.runtime.close()  # waits for every batch already handed to a worker
    if opts.state_dir:
        path = snapshot.save(stack.cloud, stack.clock.now(), opts.state_dir)
        out.print(f"state saved to {path}")
    stack.cloud.stop()
    out.print("stopped")
    sys.stdout.flush()
