"""``rebound local rehearse``: deploy a synthesized template to the local cloud and run a
scenario against it, each function from its built bundle in a process of its own, under IAM.

The scenario runs as ``rebound local simulate`` runs one (virtual clock, the simulator's
invariants), with three differences: the resources come from the template (``deploy``), every
handler is the deployed one (``lambdas``, ``host.py``), and every AWS call is authorized against
its function's role. At the end the operator calls the ops API's main routes, as an administrator,
through the ops API function. The rehearsal passes iff every invariant held, no call was denied,
no invocation failed, and every function was invoked.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from rebound import resources as r
from rebound.resources import FunctionSpec
from rebound.settings import Settings
from rebound_local.clock import VirtualClock
from rebound_local.instrument import RecordingTargets
from rebound_local.rehearse.bundle import build_dir, function_path
from rebound_local.rehearse.deploy import Deployed, deploy
from rebound_local.rehearse.lambdas import FunctionFailed, FunctionHost, Ledger
from rebound_local.rehearse.rights import unused_grants
from rebound_local.rehearse.template import REPO_ROOT, Template, synthesize
from rebound_local.runtime import Handler
from rebound_local.scenario import LoadedScenario, load_scenario
from rebound_local.simulate import Simulation
from rebound_local.stack import Faults, LocalStack, start_local

log = logging.getLogger("rebound_local.rehearse")

SMOKE = REPO_ROOT / "scenarios" / "rehearsal-smoke.yaml"
OPERATOR = "arn:aws:iam::123456789012:role/RehearsalOperators"
OPS_EVENT = REPO_ROOT / "events" / "ops_api" / "get-health.json"
ROUTES: tuple[tuple[str, str, dict[str, str] | None], ...] = (
    ("GET", "/health", None),
    ("GET", "/tasks", None),
    ("GET", "/tasks/acme.invoice-export-001", None),
    ("GET", "/runs", {"state": "dead_lettered"}),
    ("GET", "/workorders", None),
    ("GET", "/dlq", None),
    ("GET", "/queues", None),
    ("GET", "/policies", None),
    ("GET", "/workstreams", None),
    ("GET", "/sla/report", None),
    ("GET", "/flags", None),
    ("PUT", "/tasks/acme.invoice-export-001/pause", None),
    ("PUT", "/tasks/acme.invoice-export-001/resume", None),
)
"""The ops API's main routes the operator calls at the end of every rehearsal (a pause and a
resume write the task and its schedule)."""


class TemplateDeployment:
    """``stack.Deployment`` from a template: its resources, its functions, their processes."""

    def __init__(
        self,
        template: Template,
        environment: str,
        log: IO[str] | None,
        environments: dict[str, dict[str, str]] | None = None,
        crash: dict[str, Any] | None = None,
    ) -> None:
        self.template = template
        self.crash = crash
        self.environment = environment
        self.log = log
        self.environments = environments or {}
        self.ledger = Ledger()
        self.hosts: dict[str, FunctionHost] = {}
        self.deployed: Deployed | None = None

    def provision(self, session: Any, endpoint_url: str | None, environment: str) -> Settings:
        self.deployed = deploy(self.template, session, endpoint_url, self.environment)
        return self.deployed.settings

    def functions(self, endpoint_url: str, targets: RecordingTargets) -> tuple[FunctionSpec, ...]:
        assert self.deployed is not None
        for logical, deployed in self.deployed.functions.items():
            if deployed.code_path is None:
                raise FunctionFailed(f"{logical}: the template names no code asset (aws:asset:path)")
            self.hosts[logical] = FunctionHost(
                deployed,
                function_path(deployed.code_path),
                endpoint_url,
                self.deployed.key_policies,
                self.ledger,
                targets,
                self.log,
                self.environments.get(logical),
                self.crash,
            )
        return self.deployed.specs

    def handler(self, spec: FunctionSpec) -> Handler:
        return self.hosts[spec.logical].invoke

    def close(self) -> None:
        for host in self.hosts.values():
            host.close()


class RehearsedSimulation(Simulation):
    def __init__(self, loaded: LoadedScenario, deployment: TemplateDeployment, **kwargs: Any) -> None:
        super().__init__(loaded, transport="inproc", **kwargs)
        self.deployment = deployment
        self.routes: list[dict[str, Any]] = []

    def _start_stack(self, clock: VirtualClock) -> LocalStack:
        sc = self.scenario
        return start_local(
            clock,
            environment=self.deployment.environment,
            faults=Faults.from_config(sc.faults, self.seed),
            jitter_seed=self.seed,
            transport="inproc",
            log_file=self.log_file,
            log_level=logging.WARNING,
            stall_wall_s=self.stall_wall_s,
            deployment=self.deployment,
        )

    def _sabotage_end(self, stack: LocalStack) -> None:
        super()._sabotage_end(stack)
        self.routes = call_routes(stack, self.deployment)


OPERATOR_KEY = "AKIAREHEARSALOPERATOR"
API = "https://rehearsal.execute-api.us-east-1.amazonaws.com/prod"


def call_routes(stack: LocalStack, deployment: TemplateDeployment) -> list[dict[str, Any]]:
    """The operator's calls: each route signed with SigV4 by the operator's credentials, let in by
    the IAM-authorized front door (which names the identity) and handed to the ops API function
    as API Gateway hands it. Two requests the front door must refuse come last: one unsigned, one
    signed with the wrong secret; neither reaches the function."""
    from rebound.ops.access import TenantAccess
    from rebound_local.rehearse.sigv4 import Gateway, Refused, Signer, url_of

    TenantAccess(stack.deps).grant(OPERATOR, ["*"], actor="rehearsal")
    host = deployment.hosts[r.OPS_API_FUNCTION]
    base = json.loads(OPS_EVENT.read_text())
    secret = "rehearsal-operator-secret"
    gateway = Gateway("us-east-1", {OPERATOR_KEY: (secret, OPERATOR)})
    signer = Signer(OPERATOR_KEY, secret, "us-east-1")
    spec = next(s for s in deployment.deployed.specs if s.logical == r.OPS_API_FUNCTION)  # type: ignore[union-attr]
    from botocore.awsrequest import AWSRequest

    from rebound_local.runtime import LocalContext
    from rebound_local.scheduler import random_uuid

    requests = [(f"{m} {p}", signer.sign(m, url_of(API, p, q))) for m, p, q in ROUTES]
    requests.append(("unsigned GET /health", AWSRequest(method="GET", url=url_of(API, "/health"))))
    requests.append(
        (
            "wrong secret GET /tasks",
            Signer(OPERATOR_KEY, "not-the-secret", "us-east-1").sign("GET", url_of(API, "/tasks")),
        )
    )
    out = []
    for label, request in requests:
        try:
            event = gateway.admit(request, base)
        except Refused as refused:
            out.append({"route": label, "status": 403, "refused": refused.message})
            continue
        context = LocalContext(spec, stack.clock, stack.settings.environment, random_uuid(stack.runtime._ids))
        try:
            answer = host.invoke(event, context)
            out.append({"route": label, "status": int(answer.get("statusCode", 0))})
        except FunctionFailed as exc:
            out.append({"route": label, "status": 0, "error": str(exc)})
    return out


@dataclass
class RehearsalResult:
    report: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return bool(self.report.get("ok"))


def rehearse(
    template_path: Path | None = None,
    scenario_path: Path | None = None,
    *,
    environment: str = "dev",
    log_path: Path | None = None,
    environments: dict[str, dict[str, str]] | None = None,
) -> RehearsalResult:
    """Rehearse a deploy; ``environments`` replaces functions' environments (a test's sabotage)."""
    started = time.monotonic()
    path = template_path or synthesize(environment)
    template = Template.load(path)
    oversize = oversize_environments(Template.load(path))
    if oversize:  # Lambda refuses the functions: nothing to run
        return RehearsalResult(refused(path, oversize, time.monotonic() - started))
    loaded = load_scenario(scenario_path or SMOKE)
    log_path = log_path or build_dir() / "functions.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_file = log_path.open("w", encoding="utf-8")
    crash = loaded.scenario.faults.crash
    points = {"points": list(crash.points), "limit": crash.limit or 1} if crash else None
    deployment = TemplateDeployment(template, environment, log_file, environments, points)
    try:
        simulation = RehearsedSimulation(
            loaded, deployment, log_file=log_path.with_suffix(".engine.log") if log_path else None
        )
        result = simulation.run().report
    finally:
        deployment.close()
        log_file.close()
    assert deployment.deployed is not None
    plain = plain_log_lines(log_path)
    ledger = deployment.ledger
    uninvoked = sorted(set(deployment.deployed.functions) - set(ledger.invocations))
    # every signed call answers 2xx; the two the front door must refuse answer 403 before the function
    failed_routes = [
        route
        for route in simulation.routes
        if (
            route["status"] != 403
            if route["route"].startswith(("unsigned", "wrong secret"))
            else not 200 <= route["status"] < 300
        )
    ]
    report = {
        "ok": bool(result.get("ok"))
        and not ledger.denials
        and not ledger.failures
        and not uninvoked
        and not failed_routes
        and not plain,
        "template": str(path),
        "scenario": str(scenario_path or SMOKE),
        "denied": [d.line() for d in ledger.denials],
        "oversize": [],
        "failed_invocations": ledger.failures,
        "functions_not_invoked": uninvoked,
        "routes": simulation.routes,
        "plain_log_lines": plain[:20],
        "log": str(log_path),
        "invocations": dict(sorted(ledger.invocations.items())),
        "crashes": dict(sorted(ledger.crashes.items())),
        "calls": {name: dict(sorted(counts.items())) for name, counts in sorted(ledger.calls.items())},
        "grants_not_used": {
            name: unused_grants(deployed.statements, ledger.used.get(name, set()))
            for name, deployed in sorted(deployment.deployed.functions.items())
        },
        "resources": deployment.deployed.coverage,
        "names": {
            "audit_key": deployment.deployed.settings.audit_key_id,
            "tables": deployment.deployed.settings.tables,
            "queues": {k: v.arn for k, v in deployment.deployed.settings.queues.items()},
        },
        "invariants_ok": bool(result.get("ok")),
        "simulation": result,
        "wall_s": round(time.monotonic() - started, 1),
    }
    return RehearsalResult(report)


ENVIRONMENT_LIMIT = 4096
"""Lambda refuses a function whose environment variables add up to more than 4 KB."""


def environment_bytes(environment: dict[str, str]) -> int:
    """The size Lambda's 4 KB limit counts: every variable's name and value."""
    return sum(len(k.encode()) + len(v.encode()) for k, v in environment.items())


def oversize_environments(template: Template) -> list[str]:
    """The functions whose environment Lambda would refuse, with AWS's names in it."""
    return [
        f"{name}: environment of {size:,} bytes, over Lambda's {ENVIRONMENT_LIMIT:,}"
        for name, deployed in sorted(template.functions().items())
        for size in [environment_bytes(deployed.environment)]
        if size > ENVIRONMENT_LIMIT
    ]


def refused(path: Path, oversize: list[str], wall_s: float) -> dict[str, Any]:
    """The report of a template the deploy would stop at: no scenario ran."""
    return {
        "ok": False,
        "template": str(path),
        "scenario": "(not run: the deploy would fail)",
        "denied": [],
        "oversize": oversize,
        "failed_invocations": [],
        "functions_not_invoked": [],
        "routes": [],
        "plain_log_lines": [],
        "invocations": {},
        "calls": {},
        "resources": {},
        "invariants_ok": False,
        "simulation": {},
        "wall_s": round(wall_s, 1),
    }


def plain_log_lines(path: Path) -> list[str]:
    """Lines the functions wrote that are not JSON log records (CloudWatch Logs Insights could not
    read them), leaving out Python's warnings (a line naming a ``Warning`` and its source line)."""
    out, after_warning = [], False
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if line.startswith("{") or not line.strip():
            after_warning = False
            continue
        if "Warning:" in line:
            after_warning = True
            continue
        if after_warning and line.startswith(" "):
            continue
        out.append(line)
    return out


def print_summary(result: RehearsalResult, echo: Any) -> None:
    report = result.report
    echo(f"template {report['template']}, scenario {report['scenario']} ({report['wall_s']} s)")
    for how, kinds in sorted(report["resources"].items()):
        echo(f"  {how}: {', '.join(kinds)}")
    for name, counts in report["calls"].items():
        echo(
            f"  {name} ({report['invocations'].get(name, 0)} invocations): "
            + ", ".join(f"{a} x{n}" for a, n in counts.items())
        )
    for name, grants in report.get("grants_not_used", {}).items():
        if grants:
            echo(f"  {name}: {len(grants)} grants the scenario did not use (see the report)")
    for route in report["routes"]:
        echo(f"  ops API {route['route']}: {route['status']}")
    for line in report["denied"]:
        echo(f"DENIED {line}")
    for line in report["oversize"]:
        echo(f"OVERSIZE {line}")
    for failure in report["failed_invocations"][:20]:
        echo(f"FAILED {failure['function']} ({failure['phase']}): {failure['type']}: {failure['message']}")
    for line in report["plain_log_lines"]:
        echo(f"NOT JSON (log line) {line}")
    for name in report["functions_not_invoked"]:
        echo(f"NOT INVOKED {name}")
    if not report["invariants_ok"]:
        broken = [
            k
            for k, v in (report["simulation"].get("invariants") or {}).items()
            if not (v or {}).get("ok", True)
        ]
        echo(f"INVARIANTS broken: {', '.join(broken) or 'see the report'}")
    echo("rehearsal passed" if result.ok else "rehearsal FAILED")
