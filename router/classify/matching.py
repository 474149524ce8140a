"""Matching a request against `ROUTES`: `match(method, path) -> Match`, pure, raising
RouteNotFound (404) or MethodNotAllowed (405)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType

from router.classify.model import Match, Route
from router.classify.nodes import ROUTES
from router.errors import MethodNotAllowed, RouteNotFound

_PARAM = re.compile(r"\{(\w+)(?::([^{}]+))?\}")
# Percent-encoded '/', '\', NUL and '.' have no business in a decoded path: they mean a client
# double-encoded a separator or traversal that a backend might decode a second time.
_BAD_ENCODED = re.compile(r"%(?:2f|5c|00|2e)", re.IGNORECASE)


def _compile(template: str) -> re.Pattern[str]:
    out, pos = [], 0
    for m in _PARAM.finditer(template):
        out.append(re.escape(template[pos : m.start()]))
        out.append(f"(?P<{m.group(1)}>{m.group(2) or '[^/]+'})")
        pos = m.end()
    out.append(re.escape(template[pos:]))
    return re.compile("".join(out))


def _index(
    routes: tuple[Route, ...],
) -> tuple[dict[str, tuple[Route, ...]], tuple[tuple[re.Pattern[str], tuple[Route, ...]], ...]]:
    exact: dict[str, list[Route]] = {}
    patterned: dict[str, list[Route]] = {}
    for route in routes:
        bucket = patterned if _PARAM.search(route.template) else exact
        bucket.setdefault(route.template, []).append(route)
    for group in (*exact.values(), *patterned.values()):
        seen: set[str] = set()
        for route in group:
            if seen & route.methods:
                raise ValueError(f"route table: {route.template} declares a method twice")
            seen |= route.methods
    return (
        {t: tuple(rs) for t, rs in exact.items()},
        tuple((_compile(t), tuple(rs)) for t, rs in patterned.items()),
    )


_EXACT, _PATTERNED = _index(ROUTES)
_NO_PARAMS: Mapping[str, str] = MappingProxyType({})


def _unsafe(path: str) -> bool:
    if not path.startswith("/") or "\x00" in path or "\\" in path or "//" in path:
        return True
    if _BAD_ENCODED.search(path):
        return True
    return any(seg in (".", "..") for seg in path.split("/"))


def _candidates(path: str) -> tuple[tuple[Route, ...], Mapping[str, str]] | None:
    exact = _EXACT.get(path)
    if exact is not None:
        return exact, _NO_PARAMS
    for pattern, routes in _PATTERNED:
        m = pattern.fullmatch(path)
        if m is not None:
            return routes, MappingProxyType(m.groupdict())
    return None


def match(method: str, path: str) -> Match:
    """Classify and return the path parameters. A single trailing '/' is ignored.

    Raises RouteNotFound for unknown or unsafe paths ('..', '.', NUL, backslash, '//',
    percent-encoded separators) and MethodNotAllowed(method, allow) for a known path whose
    template has no row for `method`; `allow` is the union over that template, HEAD included
    wherever GET is.
    """
    if _unsafe(path):
        raise RouteNotFound(path[:200])
    key = path[:-1] if len(path) > 1 and path.endswith("/") else path
    found = _candidates(key)
    if found is None:
        raise RouteNotFound(path[:200])
    routes, params = found
    for route in routes:
        if method in route.allowed:
            return Match(route, params, method)
    surfaces = {r.surface for r in routes}
    surface = surfaces.pop() if len(surfaces) == 1 else None
    raise MethodNotAllowed(method[:32], set().union(*(r.allowed for r in routes)), surface)
