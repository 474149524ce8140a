"""The one client for the router's own calls to its backends (client.py says what it owns).

`Proxy` (router/forwarding) carries client requests; this package carries everything else.
Nothing but the app's wiring, `Proxy` and this package holds the raw HTTP session
(pyproject.toml's contract on `router.backend_client.session`, tests/test_backend_calls.py).
"""

from __future__ import annotations

from router.backend_client.client import (
    UNBOUNDED,
    BackendClient,
    BackendFault,
    Outcome,
    Reply,
    fresh_connections_client,
)

__all__ = [
    "UNBOUNDED",
    "BackendClient",
    "BackendFault",
    "Outcome",
    "Reply",
    "fresh_connections_client",
]
