"""Issue 22: a management call that names another node is resolved by the dispatcher, before
the handler runs. The route table declares it (`Route.names_node`); this walks each site
handler's code (transitively through the router's own functions) to prove the declaration and
the handler agree, so a new route cannot read a node id without declaring it."""

from __future__ import annotations

import functools
import inspect
import types
from collections.abc import Callable
from typing import Any

import pytest

from router.api import HANDLERS
from router.app import MANAGEMENT_PREFIXES
from router.classify import ROUTES, Route
from router.domain import Surface
from router.edge import params

# Handlers that still find the node id themselves (`node_of`: `node_id` in a JSON body first,
# then the query) and raise RemoteNode mid-handler for the master's `relayable` wrapper: not
# yet migrated (docs/architecture.md). This set may only shrink.
STILL_RAISING = frozenset(
    {
        "site.nodes_unload",
        "site.backends_init",
        "site.backends_init_cancel",
        "site.launch_options_set",
        "site.download_search",
        "site.download_repository",
        "site.download_plan",
        "site.download_rescan",
        "site.download_start",
        "site.download_job",
        "site.download_events",
        "site.download_pause",
        "site.download_resume",
        "site.download_cancel",
        "site.webuis_session",
        "site.webuis_load",
        "site.store_download",
        "site.analytics",
        "site.load_captures",
        "site.load_capture",
        "site.load_capture_output",
        "site.load_errors",
        "site.load_errors_clear",
        "site.routing_groups",
        "site.text_routing_groups",
        "site.models_state_set",
        "site.cook_preview",
        "site.cook_apply",
        "site.cook_delete",
        "site.config_file_delete",
        "site.config_file_preview",
        "site.config_file_apply",
        "site.model_file_hash",
        "site.assets_export",
        "site.assets_resolve",
        "site.assets_resolve_batch",
        "site.assets_import",
        "site.assets_candidates",
        "site.assets_bind",
        "site.assets_substitute",
        "site.assets_job_start",
        "bench.run",
    }
)
_RAISING = (params.node_of, params.resolve_node, params.node_named)


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


@pytest.mark.parametrize("route", SITE_ROUTES, ids=lambda r: f"{r.template} {sorted(r.methods)}")
def test_a_handler_that_reads_a_node_id_declares_it(route: Route) -> None:
    reached = _reached(HANDLERS[route.handler])
    uses_resolved = params.addressed_node in reached
    raises = any(f in reached for f in _RAISING)
    if route.names_node:
        assert uses_resolved, "declared names_node: the handler reads addressed_node()"
        assert not raises, "a declared route's handler never resolves (or raises) itself"
    else:
        assert not uses_resolved, "addressed_node() needs the names_node declaration"
        assert not raises or route.handler in STILL_RAISING, (
            f"{route.handler} reads a node id: declare names_node on its row (router/classify.py)"
        )


def test_the_walk_sees_node_reads_through_wrappers() -> None:
    """The check can fail: the walk finds node reads behind a module attribute and a closure."""
    assert params.addressed_node in _reached(HANDLERS["site.assets_job"])  # asset_jobs.status
    assert params.node_of in _reached(HANDLERS["site.assets_export"])  # _posted(export)


def test_still_raising_lists_only_routes_that_raise() -> None:
    for name in STILL_RAISING:
        assert any(f in _reached(HANDLERS[name]) for f in _RAISING), name
