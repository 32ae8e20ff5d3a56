"""Nothing of one tenant is ever visible to or changeable by another, on random mixes of both
tenants' tasks, dead-lettered runs (with their DLQ messages and work orders), work orders opened
by hand, workstreams with runs and redrive jobs.

Each example makes two fresh tenants with a drawn mix each, and a caller of the second only. Every
route of the ops API (from its route table) is then called by that caller, naming the first
tenant's things where the route's rule finds its tenant (a drawn one of each kind): no answer shows
an identifier of the first tenant the request did not carry, a route about one of its things
answers 404, and the first tenant's items are the same afterwards. The caller's lists still show
its own tenant's dead-lettered runs, so the answers are not empty by accident.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Any

import pytest
from api_support import call
from authz_cases import api_document, expected, leaks, registered, request_of, routes
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tenancy_world import ACCOUNT, ROOT, Mix, build_tenant, items_of, world_of

from rebound import wiring
from rebound.api.app import build_app, route_rules
from rebound.engine.deps import Deps
from rebound.ops.authz import Public

pytestmark = pytest.mark.property_based

_EXAMPLE = itertools.count()

mixes = st.builds(
    Mix,
    dead=st.lists(st.integers(min_value=0, max_value=2), min_size=1, max_size=2).map(tuple),
    order_by_hand=st.booleans(),
    workstream=st.booleans(),
    job=st.booleans(),
)


@pytest.fixture
def api(deps: Deps) -> Iterator[Any]:
    from rebound.handlers import ops_api

    wiring.use(deps)
    yield ops_api
    wiring.use(None)


@settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(first=mixes, second=mixes, pick=st.integers(min_value=0, max_value=3))
def test_nothing_of_one_tenant_is_visible_to_or_changeable_by_another(
    api: Any, deps: Deps, first: Mix, second: Mix, pick: int
) -> None:
    n = next(_EXAMPLE)
    owner, other = f"t{n}-owner", f"t{n}-other"
    caller = f"arn:aws:iam::{ACCOUNT}:user/operator-{n}"
    deps.settings = deps.settings.model_copy(update={"identities": {caller: [other], ROOT: ["*"]}})
    theirs = build_tenant(deps, owner, first)
    mine = build_tenant(deps, other, second)
    world = world_of(theirs, pick)
    app = build_app(lambda: deps)
    document = api_document()
    rules = route_rules(app)
    before = items_of(deps, theirs)
    for method, template, operation in routes():
        rule = rules[(method, registered(template))]
        if isinstance(rule.owner, Public):
            continue
        path, body, query, args = request_of(document, template, operation, rule, world, unknown=False)
        status, answer = call(api, method, path, body, query=query or None, caller=caller)
        where = f"{method} {template}"
        shown = leaks(json.dumps(answer), world, json.dumps([path, body, query]))
        assert not shown, f"{where} showed {shown}: {answer}"
        verdict = expected(rule.owner, args, "other").verdict
        assert verdict != "hidden" or status == 404, f"{where}: {status} {answer}"
        assert verdict != "refused" or status == 403, f"{where}: {status} {answer}"
    assert items_of(deps, theirs) == before
    listed = call(api, "GET", "/runs", query={"state": "dead_lettered"}, caller=caller)[1]
    assert sorted(r["run_id"] for r in listed) == sorted(
        r
        for r in mine.runs
        if deps.store.get_run(r).state.value == "dead_lettered"  # type: ignore[union-attr]
    )
