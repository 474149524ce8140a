"""Lending's typed request keys (its one app key, `LENDING`, is in router/lending/service.py
with the service it names).
"""

from __future__ import annotations

from aiohttp import web

# Set by the node inference route on a lent request: whether the link allows a model load.
BORROWED: web.RequestKey[bool] = web.RequestKey("borrowed", bool)
# Set with BORROWED when the owner asks for the helper's model to be restored afterwards.
BORROWED_RESTORE: web.RequestKey[bool] = web.RequestKey("borrowed_restore", bool)
# Set with BORROWED: the lending owner's (node ID, model ID), named by the master that lent it.
BORROWED_OWNER: web.RequestKey[tuple[str, str]] = web.RequestKey("borrowed_owner")
