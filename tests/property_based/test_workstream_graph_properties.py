"""Dependency graphs: a cycle is always found, and an acyclic graph never reports one."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rebound.domain.workstreams import find_cycle

pytestmark = pytest.mark.property_based


@st.composite
def dags(draw: st.DrawFn, min_nodes: int = 1) -> dict[str, list[str]]:
    """A random DAG: node i needs only nodes of a lower index (then shuffled names)."""
    n = draw(st.integers(min_value=min_nodes, max_value=25))
    names = draw(st.permutations([f"t{i}" for i in range(n)]))
    graph: dict[str, list[str]] = {}
    for i, name in enumerate(names):
        graph[name] = draw(st.lists(st.sampled_from(names[:i]), unique=True)) if i else []
    return graph


def _is_cycle(graph: dict[str, list[str]], path: list[str]) -> bool:
    return len(path) >= 2 and path[0] == path[-1] and all(b in graph[a] for a, b in itertools.pairwise(path))


@settings(max_examples=300, deadline=None)
@given(graph=dags())
def test_an_acyclic_graph_has_no_cycle(graph: dict[str, list[str]]) -> None:
    assert find_cycle(graph) is None


@settings(max_examples=300, deadline=None)
@given(graph=dags(min_nodes=1), data=st.data())
def test_a_back_edge_always_makes_a_cycle_that_is_found(
    graph: dict[str, list[str]], data: st.DataObject
) -> None:
    # add an edge from a node to one of its ancestors (or itself): that closes a cycle
    names = list(graph)
    start = data.draw(st.sampled_from(names))
    reachable = {start}
    todo = [start]
    while todo:
        for nxt in graph[todo.pop()]:
            if nxt not in reachable:
                reachable.add(nxt)
                todo.append(nxt)
    target = data.draw(st.sampled_from(sorted(reachable)))
    graph[target] = [*graph[target], start] if start not in graph[target] else graph[target]
    cycle = find_cycle(graph)
    assert cycle is not None
    assert _is_cycle(graph, cycle), cycle
    assert len(set(cycle[:-1])) == len(cycle) - 1, "the path visits each step of the cycle once"
