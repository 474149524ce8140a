"""Lending's typed app and request keys: the resources `router.lending`'s lifetimes start.

They live here, not in router/appkeys.py, because appkeys sits below this package: the keys
name lending's own types, and lending reads the app's shared resources through appkeys.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

if TYPE_CHECKING:
    from router.config import ModelConfig
    from router.lending.decisions import DecisionLog
    from router.lending.gate import Gates
    from router.lending.leases import LendBook
    from router.lending.links import LendingValues, LinkTable
    from router.lending.push import Pusher
    from router.lending.restore import Restorer

# Lending links in force, and lending's counters (router/lending/context.py, owner.py).
LINKS: web.AppKey[LinkTable] = web.AppKey("links")
# The lending settings in force (config file, then the values saved from the WebUI).
LENDING: web.AppKey[LendingValues] = web.AppKey("lending")
# The lending decision log (router/lending/decisions.py).
DECISIONS: web.AppKey[DecisionLog] = web.AppKey("decisions")
# A master's push of its lending settings and links to its slaves (router/lending/push.py).
LENDING_PUSH: web.AppKey[Pusher] = web.AppKey("lending_push")
# Leases, held and lent requests, this node's cost fits (router/lending/planner.py).
LEND: web.AppKey[LendBook] = web.AppKey("lend")
# Helper side of lending (router/lending/helper.py): the enrolled models' admission gates, and
# the lanes to restore after borrowed work.
GATES: web.AppKey[Gates] = web.AppKey("gates")
RESTORE: web.AppKey[Restorer[ModelConfig]] = web.AppKey("restore")

# Set by the node inference route on a lent request: whether the link allows a model load.
BORROWED: web.RequestKey[bool] = web.RequestKey("borrowed", bool)
# Set with BORROWED when the owner asks for the helper's model to be restored afterwards.
BORROWED_RESTORE: web.RequestKey[bool] = web.RequestKey("borrowed_restore", bool)
# Set with BORROWED: the lending owner's (node ID, model ID), named by the master that lent it.
BORROWED_OWNER: web.RequestKey[tuple[str, str]] = web.RequestKey("borrowed_owner")
