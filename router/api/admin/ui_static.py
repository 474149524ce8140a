"""The admin WebUI's static files under `/router/ui/`, with the security headers on each answer.

The shell holds no data (every number it shows comes from an admin route), so it is PUBLIC in
ROUTES: a browser must be able to fetch the login view before it has a session. Files come from
the installed package (`router/ui/`, package data). Extensionless paths are client-side routes
and get the shell; a path with an extension names an asset, and a missing one is a 404.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path, PurePosixPath

from aiohttp import web

from router.edge import Handler, match_of
from router.errors import NotFound

PREFIX = "/router/ui/"
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; frame-ancestors 'none'; object-src 'none'; base-uri 'none'; "
    "form-action 'self'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".mjs": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".json": "application/json",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".ico": "image/x-icon",
    ".txt": "text/plain; charset=utf-8",
    ".md": "text/plain; charset=utf-8",
}


def _missing(tail: str) -> NotFound:
    # The edge renders it; the headers make a 404 as locked down as any other UI answer.
    return NotFound(f"no UI file {tail!r}", headers=SECURITY_HEADERS)


def ui_root() -> Path:
    return Path(str(resources.files("router") / "ui"))


def asset_path(tail: str) -> str | None:
    """The file a tail names, relative to the UI root; None = the shell. Pure (no I/O).

    Raises NotFound for anything that is not a plain relative path of visible names, so `..`,
    hidden files and backslashes never reach the file system.
    """
    parts = [p for p in PurePosixPath(tail).parts if p != "/"]
    if any(p in ("..", ".") or p.startswith(".") or "\\" in p or "\x00" in p for p in parts):
        raise _missing(tail)
    if not parts or "." not in parts[-1]:
        return None  # a client-side route such as /router/ui/models
    suffix = PurePosixPath(parts[-1]).suffix.lower()
    if suffix not in CONTENT_TYPES:
        raise _missing(tail)
    return "/".join(parts)


def _file_response(path: Path) -> web.StreamResponse:
    # no-cache = revalidate: an upgraded router never runs yesterday's modules with today's API.
    headers = {
        **SECURITY_HEADERS,
        "Content-Type": CONTENT_TYPES[path.suffix.lower()],
        "Cache-Control": "no-cache",
    }
    return web.Response(body=path.read_bytes(), headers=headers)


async def serve(request: web.Request) -> web.StreamResponse:
    if request.path == PREFIX.rstrip("/"):
        # Relative asset URLs and the client router both assume the trailing slash.
        query = f"?{request.query_string}" if request.query_string else ""
        raise web.HTTPPermanentRedirect(PREFIX + query, headers=SECURITY_HEADERS)
    tail = match_of(request).params.get("tail", "")
    relative = asset_path(tail)
    root = ui_root()
    if relative is None:
        return _file_response(root / "index.html")
    path = (root / relative).resolve()
    if not path.is_relative_to(root.resolve()) or not path.is_file():
        raise _missing(tail)
    return _file_response(path)


HANDLERS: dict[str, Handler] = {"ui.serve": serve}
