"""Typed application keys: the one registry of shared resources `create_app()` wires.

Handlers read resources with `request.app[KEY]`; nothing else is global.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from aiohttp import web

from router.edge import bodies, request

# Stamped by the outermost middleware (router/edge/errors.py), which sits below this module.
from router.edge.errors import ARRIVED as ARRIVED

if TYPE_CHECKING:
    from router.backend_client import BackendClient
    from router.benchmarks import Benchmarks
    from router.cluster import ClusterService, GuardianTable
    from router.comfy.state import ComfyState
    from router.config import Catalog, Settings
    from router.downloads import Downloads
    from router.edge.auth import Policy
    from router.edge.inflight import InFlight
    from router.edge.sessions import Sessions
    from router.edge.ui_sessions import LoginLimiter
    from router.forwarding import Proxy
    from router.keys import KeyBook
    from router.lending import Lending
    from router.media import ImageLane
    from router.records import EventBus, Metrics, Recorder
    from router.records.load_times import LoadTimes
    from router.runtime import RuntimeManager
    from router.runtime.kvcache import KvCaches
    from router.runtime.measuring import Measuring
    from router.setup import BackendSetup, LaunchOptions
    from router.site import SiteFiles
    from router.site.gguf_headers import GgufHeaders
    from router.store import Store
    from router.webuis import WebUIs

SETTINGS: web.AppKey[Settings] = web.AppKey("settings")
CATALOG: web.AppKey[Catalog] = web.AppKey("catalog")
EVENTS: web.AppKey[EventBus] = web.AppKey("events")
METRICS: web.AppKey[Metrics] = web.AppKey("metrics")
# The router's own calls to backends (router/backend_client); the raw session is not here.
BACKENDS: web.AppKey[BackendClient] = web.AppKey("backend_client")
RUNTIMES: web.AppKey[RuntimeManager] = web.AppKey("runtimes")
PROXY: web.AppKey[Proxy] = web.AppKey("proxy")
STORE: web.AppKey[Store] = web.AppKey("store")
RECORDER: web.AppKey[Recorder] = web.AppKey("recorder")
IMAGES: web.AppKey[ImageLane] = web.AppKey("images")  # image-lane memory: chosen model, jobs
COMFY: web.AppKey[ComfyState] = web.AppKey("comfy")  # ComfyUI uploads and video jobs
SITE_FILES: web.AppKey[SiteFiles] = web.AppKey("site_files")  # model-file scan + hash cache
GGUF_HEADERS: web.AppKey[GgufHeaders] = web.AppKey("gguf_headers")  # Ollama model metadata
BENCHMARKS: web.AppKey[Benchmarks] = web.AppKey("benchmarks")  # one run at a time per node
DOWNLOADS: web.AppKey[Downloads] = web.AppKey("downloads")  # absent when downloads are off
BACKEND_SETUP: web.AppKey[BackendSetup] = web.AppKey("backend_setup")  # backend init jobs
LAUNCH_OPTIONS: web.AppKey[LaunchOptions] = web.AppKey("launch_options")  # vLLM offline switches
# Open realtime sessions, told to go away (1001) when shutdown begins (R28).
SESSIONS: web.AppKey[Sessions] = web.AppKey("realtime_sessions")
# Every request and job in flight: what the graceful stop drains (R27, router/edge/inflight.py).
INFLIGHT: web.AppKey[InFlight] = web.AppKey("inflight")
# Past load durations per model: `usual_load_seconds` on `loading` events (docs/events.md).
LOAD_TIMES: web.AppKey[LoadTimes] = web.AppKey("load_times")
# KV persistence: its probe verdicts per configuration (docs/swaps.md, the model detail page).
KV_CACHES: web.AppKey[KvCaches] = web.AppKey("kv_caches")
# The auth policy (keys, profile, WebUI sessions) and the failed-login limiter (api/admin/ui.py).
AUTH: web.AppKey[Policy] = web.AppKey("auth_policy")
UI_LOGINS: web.AppKey[LoginLimiter] = web.AppKey("ui_logins")
# The live scoped keys (router/keys): the same book the auth policy matches against.
KEYS: web.AppKey[KeyBook] = web.AppKey("scoped_keys")
# The cluster role's runtime: registry, polling or registration (router/cluster/service.py).
CLUSTER: web.AppKey[ClusterService] = web.AppKey("cluster")
# The app's dispatcher: node routes hand an inner request to it (router/api/node/node.py).
DISPATCH: web.AppKey[Callable[[web.Request], Awaitable[web.StreamResponse]]] = web.AppKey(
    "dispatch"
)
# Every handler, management ones included: what a slave runs for the master's node/site calls.
NODE_DISPATCH: web.AppKey[Callable[[web.Request], Awaitable[web.StreamResponse]]] = web.AppKey(
    "node_dispatch"
)
# Backend WebUIs: enabled kinds, tickets, sessions, the listener (docs/webuis.md).
WEBUIS: web.AppKey[WebUIs] = web.AppKey("webuis")
# The backend-UI listener's app: the management app it serves for (its resources are shared).
MAIN_APP: web.AppKey[web.Application] = web.AppKey("main_app")
# Measured memory per configuration (router/runtime/measuring.py, docs/residency.md): the
# manager's `figures`, the ledger's `Figures.lookup`, the store download's `memory_figures`.
FIGURES: web.AppKey[Measuring] = web.AppKey("memory_figures")
# Guardian assignments in force (router/api/site/guardians.py); replaced whole on a change.
GUARDIANS: web.AppKey[GuardianTable] = web.AppKey("guardians")
# Lending on this node (router/lending/service.py), opened by router/lifetimes.py.
LENDING: web.AppKey[Lending] = web.AppKey("lending")
# Asks the server to stop gracefully (server.py sets it to its stop event).
SHUTDOWN: web.AppKey[Callable[[], None]] = web.AppKey("shutdown")

# Per-request storage (set by the edge and the classifier, read by handlers): defined where
# they are set (router/edge), re-exported here.
MATCH, ROUTE = request.MATCH, request.ROUTE
RAW_BODY = bodies.RAW_BODY  # the body a handler read, kept for a relay to the node it names
