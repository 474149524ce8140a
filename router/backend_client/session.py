"""The app's raw HTTP session, under its own key: only the app's wiring reads it, to hand it
to `Proxy`, the `BackendClient` and the cluster's `NodeClient` (router/cluster/client.py, the
one client to other routers). A contract in pyproject.toml keeps every other module from
importing this one, so a handler or a runtime part cannot open a connection of its own.
"""

from __future__ import annotations

import aiohttp
from aiohttp import web

SESSION: web.AppKey[aiohttp.ClientSession] = web.AppKey("session")
