"""The site APIs, `/router/v1/site/...` and `/router/v1/benchmarks` (admin key): the store's
analytics and captures, the model inventory and the models' on/off switch, files and assets, configurations, downloads,
backend setup, benchmarks, backend WebUIs, guardians and lending's links, settings, decisions
and summary. On a master a call that names another node is relayed there (router/api/node).

`HANDLERS` merges the modules' tables; the resources these routes start are the `*_context`
lifetimes exported here, wired by router/app.py in its `cleanup_ctx` order.
"""

from router.api.site import (
    assets,
    benchmarks,
    configs,
    downloads,
    guardians,
    inventory,
    lending,
    lending_decisions,
    lending_settings,
    lending_summary,
    models_state,
    setup,
    store,
    webuis,
)
from router.api.site.benchmarks import benchmarks_context
from router.api.site.downloads import downloads_context
from router.api.site.guardians import guardians_context
from router.api.site.inventory import site_context
from router.api.site.webuis import webuis_context
from router.edge import Handler

HANDLERS: dict[str, Handler] = {
    **store.HANDLERS,
    **inventory.HANDLERS,
    **assets.HANDLERS,
    **configs.HANDLERS,
    **benchmarks.HANDLERS,
    **guardians.HANDLERS,
    **lending.HANDLERS,
    **lending_settings.HANDLERS,
    **lending_decisions.HANDLERS,
    **lending_summary.HANDLERS,
    **webuis.HANDLERS,
    **downloads.HANDLERS,
    **setup.HANDLERS,
    **models_state.HANDLERS,
}

__all__ = [
    "HANDLERS",
    "benchmarks_context",
    "downloads_context",
    "guardians_context",
    "site_context",
    "webuis_context",
]
