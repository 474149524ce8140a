"""Operating the router: health and metrics, explicit load / unload / shutdown / status, the
runtime event stream, scoped keys (`keys`), the admin WebUI (its files and its login), and the backend-UI listener
that serves backend WebUIs on their own origin (`webui_proxy`; its app is built by
router/app.py's `create_backend_ui_app`).

`HANDLERS` merges the modules' tables.
"""

from router.api.admin import control, keys, meta, ui, ui_static
from router.api.admin.keys import keys_context
from router.api.admin.webui_proxy import (
    listener_route_of,
    listener_settings,
    on_prepare,
    serve,
    share_resources,
)
from router.edge import Handler

HANDLERS: dict[str, Handler] = {
    **meta.HANDLERS,
    **control.HANDLERS,
    **keys.HANDLERS,
    **ui_static.HANDLERS,
    **ui.HANDLERS,
}

__all__ = [
    "HANDLERS",
    "keys_context",
    "listener_route_of",
    "listener_settings",
    "on_prepare",
    "serve",
    "share_resources",
]
