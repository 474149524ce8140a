"""Which HTTP routes a backend family implements, as the router launches it (docs/backends.md).

A pure match of method and path against the family's templates, asked through
`Backend.serves`: the pipeline refuses a path the chosen family does not serve with a clear 400
(router/inference/choice.py), and the image lane answers the A1111 routes its backend lacks.
"""

from __future__ import annotations

import re
from collections.abc import Iterable


class RouteTable:
    """Method + path templates: `{name}` is one segment, `/*` a subtree, `*` any suffix."""

    def __init__(self, entries: Iterable[tuple[str, str]]) -> None:
        self._entries: list[tuple[frozenset[str], re.Pattern[str]]] = []
        for methods, template in entries:
            self._entries.append((frozenset(methods.split()), _template_regex(template)))
        # Every forwarded request asks; a handful of paths are asked again and again. Bounded:
        # the path is the client's to choose.
        self._seen: dict[tuple[str, str], bool] = {}

    def matches(self, path: str, method: str) -> bool:
        known = self._seen.get((path, method))
        if known is not None:
            return known
        if len(self._seen) >= 512:
            self._seen.clear()
        self._seen[(path, method)] = found = self._match(path, method)
        return found

    def _match(self, path: str, method: str) -> bool:
        method = "GET" if method.upper() == "HEAD" else method.upper()
        path = path.split("?", 1)[0]
        if len(path) > 1:
            path = path.rstrip("/")
        return any(method in ms and rx.fullmatch(path) for ms, rx in self._entries)


def _template_regex(template: str) -> re.Pattern[str]:
    tail = ""
    if template.endswith("/*"):  # the path itself and anything below it
        template, tail = template[:-2], "(?:/.*)?"
    elif template.endswith("*"):  # any suffix (`/view*`: /view.png, /view_image...)
        template, tail = template[:-1], ".*"
    parts = re.split(r"(\{[a-z_]+\})", template)
    rx = "".join("[A-Za-z0-9_.:-]+" if p.startswith("{") else re.escape(p) for p in parts)
    return re.compile(rx + tail)
