"""The node's copy of each management row, and `ROUTES`: the table with them.

A master sends a site or benchmark call that names another node to that node's
`/router/v1/node/<path>` (router/api/node/site_relay.py). The contract names five of these paths
without `site/` (right column); their `/router/v1/node/site/...` spelling stays an alias for
one release (docs/cluster.md).
"""

from __future__ import annotations

from dataclasses import replace

from router.classify.model import NamesNode, Route
from router.classify.table import TABLE
from router.domain import Role, Surface

NODE_CONTRACT_PATHS: tuple[tuple[str, str], ...] = (
    ("site/nodes/backends/launch-options", "backends/launch-options"),
    ("site/analytics/flush", "analytics/flush"),
    ("site/store/download", "store/download"),
    ("site/load-errors", "load-errors"),
    ("site/load-captures", "load-captures"),
)
_V1, _NODE_V1 = "/router/v1/", "/router/v1/node/"
_MANAGED = ("/router/v1/site/", "/router/v1/benchmarks")


def _renamed(rest: str, pairs: tuple[tuple[str, str], ...]) -> str:
    for old, new in pairs:
        if rest == old or rest.startswith(old + "/"):
            return new + rest[len(old) :]
    return rest


def node_path(path: str) -> str:
    """The node path a master calls for management `path` (or template) `/router/v1/...`."""
    return _NODE_V1 + _renamed(path.removeprefix(_V1), NODE_CONTRACT_PATHS)


def management_path(path: str) -> str:
    """The management path a node serves for `/router/v1/node/<path>` (either spelling)."""
    back = tuple((new, old) for old, new in NODE_CONTRACT_PATHS)
    return _V1 + _renamed(path.removeprefix(_NODE_V1), back)


def _on_node(route: Route, template: str) -> Route:
    return replace(
        route,
        template=template,
        surface=Surface.NODE,
        role=Role.CLUSTER,
        handler="node.site",
        names_node=NamesNode.NO,  # `node.site` dispatches the management row, which names it
    )


def _node_copies(table: tuple[Route, ...]) -> tuple[Route, ...]:
    """Each management row again under /router/v1/node/ (the cluster token's), served by
    `node.site` with the same methods; at the contract's path and at the `site/` alias."""
    rows: list[Route] = []
    for route in table:
        if route.template.startswith(_MANAGED):
            alias = _NODE_V1 + route.template.removeprefix(_V1)
            contract = node_path(route.template)
            rows += [_on_node(route, contract)] + (
                [_on_node(route, alias)] if alias != contract else []
            )
    return tuple(rows)


ROUTES: tuple[Route, ...] = TABLE + _node_copies(TABLE)
