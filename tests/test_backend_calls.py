"""Only the backend client, `Proxy`, the cluster's `NodeClient` and the app's wiring open
connections (docs/architecture.md, "Talking to backends").

import-linter keeps the raw session's app key (router/backend_client/session.py) to the app's
wiring; what an import cannot show is checked here on the syntax tree of every module under
router/: naming aiohttp's session or connector classes, reading an app key named `SESSION`,
calling `aiohttp.request`, or calling an HTTP verb on something named like a session (a
session handed in as a parameter).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROUTER = Path(__file__).resolve().parent.parent / "router"

# Who may hold the raw session: the wiring that makes it, the client to backends, the proxy
# that carries client requests (and its opening half), and the one client to other routers.
ALLOWED = frozenset(
    {
        "app.py",
        "backend_client/client.py",
        "backend_client/session.py",
        "forwarding/proxy.py",
        "forwarding/opening.py",
        "cluster/client.py",
    }
)
_CLASSES = frozenset({"ClientSession", "TCPConnector", "UnixConnector"})
_SESSION_NAMES = frozenset({"session", "_session"})
_VERBS = frozenset({"get", "post", "put", "patch", "delete", "head", "options", "request"})
_OPENERS = _VERBS | {"ws_connect"}


def raw_calls(source: str) -> list[str]:
    """Each place in `source` that opens or uses a connection without the backend client."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Name) and node.id in _CLASSES:
            found.append(f"line {node.lineno}: {node.id}")
        elif isinstance(node, ast.Attribute) and node.attr in _CLASSES:
            found.append(f"line {node.lineno}: .{node.attr}")
        elif isinstance(node, ast.Subscript) and getattr(node.slice, "id", "") == "SESSION":
            found.append(f"line {node.lineno}: [SESSION]")
        elif isinstance(node, ast.alias) and node.name.rsplit(".", 1)[-1] in _CLASSES:
            found.append(f"import {node.name}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = node.func.value
            name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
            verb = node.func.attr
            if (name in _SESSION_NAMES and verb in _OPENERS) or (name, verb) == (
                "aiohttp",
                "request",
            ):
                found.append(f"line {node.lineno}: {name}.{verb}()")
    return found


def test_no_module_calls_a_backend_past_the_client() -> None:
    offenders = {}
    for path in sorted(ROUTER.rglob("*.py")):
        relative = path.relative_to(ROUTER).as_posix()
        if relative not in ALLOWED and (calls := raw_calls(path.read_text())):
            offenders[relative] = calls
    assert offenders == {}


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import aiohttp\naiohttp.ClientSession()", ["line 2: .ClientSession"]),
        ("from aiohttp import ClientSession", ["import ClientSession"]),
        ("async def f(app):\n    await app[SESSION].get('u')", ["line 2: [SESSION]"]),
        ("async def f(session):\n    await session.get('u')", ["line 2: session.get()"]),
        ("async def f(self):\n    await self._session.post('u')", ["line 2: _session.post()"]),
        ("import aiohttp\naiohttp.request('GET', 'u')", ["line 2: aiohttp.request()"]),
        ("async def f(client):\n    await client.fetch('GET', 'u')", []),
        ("def f(session):\n    session.csrf_ok('t')", []),  # a WebUI login session
    ],
)
def test_the_check_sees_each_way_round(source: str, expected: list[str]) -> None:
    assert raw_calls(source) == expected
