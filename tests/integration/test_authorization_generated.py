"""Tenancy over every route of the ops API and every command of the CLI, generated from the route
table and the command tree (not from a list kept by hand).

For each route (read from the OpenAPI document the app generates) and each leaf command (walked
from ``rebound``'s click group), the declared rule is read (``rebound.ops.authz``), the request is
filled with tenant acme's things (``tenancy_world``) where the rule says the tenant is found, and
it is made by three callers:

- a caller of another tenant: an acme object answers exactly as an unknown one (same status or
  exit code, same error with the id swapped), what every tenant shares or acme's tenant named
  outright is refused, a list shows nothing of acme, and acme's items are unchanged;
- a caller of no tenant: every route and command but the public ones is refused or hidden;
- an administrator: nothing is refused or hidden.

A route or a command added without a declared rule fails ``test_every_route_and_command_declares_a_rule``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest
import yaml
from api_support import call
from authz_cases import (
    FIELD_VALUES,
    OBJECT_KINDS,
    api_document,
    expected,
    leaks,
    named,
    registered,
    request_of,
    routes,
    value,
)
from click.testing import CliRunner
from tenancy_world import BOB, NOBODY, ROOT, World, acme_items, build

from rebound import wiring
from rebound.api.app import build_app, route_rules
from rebound.engine.deps import Deps
from rebound.ops.authz import Public, Rule
from rebound_cli.app import cli
from rebound_cli.authz import rule_of
from rebound_cli.context import App

pytestmark = pytest.mark.integration

CALLERS = {"other": BOB, "nobody": NOBODY, "admin": ROOT}


@pytest.fixture
def api(deps: Deps) -> Iterator[Any]:
    from rebound.handlers import ops_api

    wiring.use(deps)
    yield ops_api
    wiring.use(None)


def refusals(deps: Deps) -> int:
    return sum(len(deps.store.audit_trail(f"tenant#{t}")) for t in ("acme", "*"))


def test_every_route_and_command_declares_a_rule() -> None:
    rules = route_rules(build_app(lambda: None))
    undeclared = [f"{m} {p}" for m, p, _ in routes() if (m, registered(p)) not in rules]
    assert not undeclared, f"routes without a declared rule (Api.get/post/put/delete): {undeclared}"
    assert len(rules) == len(routes())
    bare = [" ".join(path) for path, command in commands() if rule_of(command.callback) is None]
    assert not bare, f"commands without @authorized (or @local_only): {bare}"


@pytest.mark.parametrize("who", ["other", "nobody", "admin"])
def test_every_route_answers_another_tenants_caller_as_its_rule_says(api: Any, deps: Deps, who: str) -> None:
    world = build(deps)
    app = build_app(lambda: deps)
    document = api_document()
    rules = route_rules(app)
    caller = CALLERS[who]
    before = acme_items(deps, world)
    # reads first: an administrator's changes (a redrive, a skip) would change what they find
    ordered = sorted(routes(), key=lambda r: r[0] != "GET")
    problems: list[str] = []
    for method, template, operation in ordered:
        rule = rules[(method, registered(template))]
        if isinstance(rule.owner, Public):
            continue
        path, body, query, args = request_of(document, template, operation, rule, world, unknown=False)
        want = expected(rule.owner, args, who)
        refused_before = refusals(deps)
        status, answer = call(api, method, path, body, query=query or None, caller=caller)
        where = f"{method} {template} as {who}"
        sent = json.dumps([path, body, query])
        found = leaks(json.dumps(answer), world, sent)
        if found and who != "admin":
            problems.append(f"{where}: answered acme's {found}: {answer}")
        if want.verdict == "hidden":
            twin = request_of(document, template, operation, rule, world, unknown=True)
            twin_status, twin_answer = call(
                api, method, twin[0], twin[1], query=twin[2] or None, caller=caller
            )
            same = json.dumps(answer).replace(str(value(world, want.kind)), "ID") == json.dumps(
                twin_answer
            ).replace(str(value(world, want.kind, unknown=True)), "ID")
            if status != 404 or twin_status != 404 or not same:
                problems.append(
                    f"{where}: {status} {answer} where an unknown id answers {twin_status} {twin_answer}"
                )
            if refusals(deps) == refused_before:
                problems.append(f"{where}: hidden, but no refusal was audited")
        elif want.verdict == "refused":
            if status != 403:
                problems.append(f"{where}: {status} {answer}, expected 403")
        elif status in (401, 403) or status >= 500 or (status == 404 and want.kind in OBJECT_KINDS):
            problems.append(f"{where}: {status} {answer}")
    if who != "admin":
        assert acme_items(deps, world) == before, f"a caller of {who} changed acme's things"
    assert not problems, "\n".join(problems)


# --------------------------------------------------------------------------- the command tree
def commands(
    group: click.Group = cli, prefix: tuple[str, ...] = ()
) -> list[tuple[tuple[str, ...], click.Command]]:
    """Every leaf command under ``group`` with its path (``("runs", "retry")``)."""
    found: list[tuple[tuple[str, ...], click.Command]] = []
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            found += commands(command, (*prefix, name))
        else:
            found.append(((*prefix, name), command))
    return found


def typed(kind: click.ParamType) -> str:
    """A valid value of a click parameter type no rule reads and no name in ``FIELD_VALUES`` has."""
    if isinstance(kind, click.DateTime):
        return "2026-03-01"
    if isinstance(kind, click.Choice):
        return str(kind.choices[0])
    if isinstance(kind, click.IntRange | click.FloatRange):
        return str(kind.min if kind.min is not None else 1)
    return "1" if isinstance(kind, click.types.IntParamType) else "x"


def argv_of(
    path: tuple[str, ...], command: click.Command, rule: Rule, world: World, unknown: bool, files: Path
) -> tuple[list[str], dict[str, Any]]:
    """The command line (and the arguments as the rule reads them): the parameters the rule reads
    name acme's things, the other required ones a value by name, ``--yes`` where it is taken."""
    reads = named(rule.owner)
    argv: list[str] = [*path]
    args: dict[str, Any] = {}
    for param in command.params:
        name = param.name or ""
        kind = reads.get(name)
        if kind == "document":
            document = files / "acme.yaml"
            document.write_text(yaml.safe_dump(world.document))
            given: Any = str(document)
        elif kind == "flag":
            continue
        elif kind is not None:
            given = value(world, kind, unknown=unknown)
        elif name == "yes":
            argv.append("--yes")
            continue
        elif isinstance(param, click.Argument) or param.required:
            plain = param.type is click.STRING
            given = FIELD_VALUES.get(name, typed(param.type)) if plain else typed(param.type)
        else:
            continue
        args[name] = given
        if isinstance(param, click.Argument):
            argv.append(str(given))
        else:
            argv += [param.opts[0], str(given)]
    return argv, args


def test_every_command_answers_another_tenants_operator_as_its_rule_says(
    deps: Deps, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    world = build(deps)
    monkeypatch.setattr(App, "deps", property(lambda self: deps))
    problems: list[str] = []
    runner = CliRunner()
    for who, caller in CALLERS.items():
        monkeypatch.setattr(App, "actor", property(lambda self, caller=caller: caller))
        before = acme_items(deps, world)
        for path, command in commands():
            rule = rule_of(command.callback)
            assert rule is not None
            if isinstance(rule.owner, Public) or (who == "admin" and not rule.action.endswith(":read")):
                continue  # an administrator's changes are the route test's; here it reads
            argv, args = argv_of(path, command, rule, world, unknown=False, files=tmp_path)
            want = expected(rule.owner, args, who)
            result = runner.invoke(cli, ["-o", "json", *argv], catch_exceptions=False)
            where = f"rebound {' '.join(argv)} as {who}"
            found = leaks(result.output, world, " ".join(argv))
            if found and who != "admin":
                problems.append(f"{where}: showed acme's {found}: {result.output}")
            if want.verdict == "hidden":
                twin, _ = argv_of(path, command, rule, world, unknown=True, files=tmp_path)
                other = runner.invoke(cli, ["-o", "json", *twin], catch_exceptions=False)
                known, unknown = str(value(world, want.kind)), str(value(world, want.kind, unknown=True))
                if (result.exit_code, other.exit_code) != (4, 4) or result.output.replace(
                    known, "ID"
                ) != other.output.replace(unknown, "ID"):
                    problems.append(
                        f"{where}: exit {result.exit_code} {result.output!r}; unknown: {other.output!r}"
                    )
            elif want.verdict == "refused":
                if result.exit_code != 7:
                    problems.append(f"{where}: exit {result.exit_code}, expected 7: {result.output}")
            elif result.exit_code in (4, 7) and want.kind in OBJECT_KINDS:
                problems.append(f"{where}: exit {result.exit_code}: {result.output}")
        if who != "admin":
            assert acme_items(deps, world) == before, f"an operator of {who} changed acme's things"
    assert not problems, "\n".join(problems)
