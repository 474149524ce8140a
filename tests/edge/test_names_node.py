"""Issue 22: a management call that names another node is resolved by the dispatcher, before
the handler runs. The route table declares whether and where a call names a node
(`Route.names_node`: query, body, filter or key); this walks each handler's code (transitively
through the router's own functions) to prove the declaration and the handler agree, so no
handler resolves a node itself and a new route cannot read a node id without declaring it."""

from __future__ import annotations

import functools
import inspect
import types
from collections.abc import Callable
from typing import Any

import pytest

from router.api import HANDLERS
from router.app import MANAGEMENT_PREFIXES
from router.classify import ROUTES, NamesNode, Route
from router.domain import Surface
from router.edge import params

# The readers of a node id in a request. The dispatcher reads the addressed node for a row that
# declares QUERY or BODY (its handler reads `addressed_node`); a FILTER row's handler reads the
# filters (the dispatcher relayed one other node already); a KEY row's handler reads the id as
# data. No other handler reads a node id at all.
_READERS = {
    NamesNode.NO: frozenset(),
    NamesNode.QUERY: frozenset({params.addressed_node}),
    NamesNode.BODY: frozenset({params.addressed_node}),
    NamesNode.FILTER: frozenset({params.node_filter}),
    NamesNode.KEY: frozenset({params.node_named}),
}
_ALL_READERS = frozenset({params.addressed_node, params.node_filter, params.node_named})


def _reached(fn: Callable[..., Any]) -> set[Callable[..., Any]]:
    """Every function of the router's a handler may call: globals its code names (and their
    attributes, for `module.function`), closure cells (decorated handlers), recursively."""
    seen: set[Callable[..., Any]] = set()
    todo = [fn]
    while todo:
        f = inspect.unwrap(todo.pop())
        if isinstance(f, functools.partial):
            todo += [f.func, *f.args, *f.keywords.values()]
            continue
        if not inspect.isfunction(f) or f in seen:
            continue
        seen.add(f)
        names = _names(f.__code__)
        for name in names:
            obj = f.__globals__.get(name)
            if isinstance(obj, types.ModuleType) and obj.__name__.startswith("router."):
                todo += [getattr(obj, a) for a in names if callable(getattr(obj, a, None))]
            elif callable(obj) and getattr(obj, "__module__", "").startswith("router."):
                todo.append(obj)
        todo += [c.cell_contents for c in f.__closure__ or () if callable(c.cell_contents)]
    return seen


def _names(code: types.CodeType) -> set[str]:
    out = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            out |= _names(const)
    return out


SITE_ROUTES = [
    r
    for r in ROUTES
    if r.template.startswith(MANAGEMENT_PREFIXES)
    and r.surface is not Surface.NODE
    and r.handler in HANDLERS
]
# Every other row a handler serves (client surfaces, control, the node routes): none names a
# node, so none of their handlers may read one (`/router/v1/models` included).
OTHER_ROUTES = [r for r in ROUTES if r.handler in HANDLERS and r not in SITE_ROUTES]


@pytest.mark.parametrize("route", SITE_ROUTES, ids=lambda r: f"{r.template} {sorted(r.methods)}")
def test_a_handler_reads_a_node_id_only_as_its_row_declares(route: Route) -> None:
    reached = _reached(HANDLERS[route.handler])
    wanted = _READERS[route.names_node]
    assert wanted <= reached, f"declared {route.names_node!r}: the handler reads {wanted}"
    others = (_ALL_READERS - wanted) & reached
    assert not others, (
        f"{route.handler} reads a node id by {sorted(f.__name__ for f in others)}: declare "
        "where its call names the node (names_node on its row, router/classify/table.py)"
    )


@pytest.mark.parametrize("route", OTHER_ROUTES, ids=lambda r: f"{r.template} {sorted(r.methods)}")
def test_no_other_handler_reads_a_node_id(route: Route) -> None:
    assert not route.names_node
    reached = _reached(HANDLERS[route.handler])
    assert not _ALL_READERS & reached, f"{route.handler} reads a node id"


def test_every_node_naming_kind_is_declared_somewhere() -> None:
    assert {r.names_node for r in SITE_ROUTES} == set(NamesNode)


def test_the_walk_sees_node_reads_through_wrappers() -> None:
    """The check can fail: the walk finds node reads behind a module attribute, a closure and
    a partial."""
    assert params.addressed_node in _reached(HANDLERS["site.assets_job"])  # asset_jobs.status
    assert params.addressed_node in _reached(HANDLERS["site.assets_export"])  # _posted(export)
    assert params.addressed_node in _reached(HANDLERS["site.assets_substitute"])  # a partial
    assert params.node_filter in _reached(HANDLERS["site.load_errors"])  # store._nodes
