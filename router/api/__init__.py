"""Route handlers by audience, one subpackage each:

- `inference`: the client surfaces (OpenAI, Ollama, Kobold, images, speech, ...).
- `site`: the admin's management routes (`/router/v1/site/...`, benchmarks).
- `node`: router to router (cluster token) and the master's relays to its nodes.
- `admin`: operating the router (health, metrics, control, events, the WebUI, the backend-UI
  listener).

Each face exports `HANDLERS` (handler name -> coroutine; the names are the `handler` field
of router/classify/table.py's route table), merged here. The subpackages import each other only
through their faces, in one direction: `admin` and `site` above `inference` above `node`
(import-linter contracts in pyproject.toml). The request chores they share are
router.edge's (`read_json`, `query_int`, `addressed_node`, `match_of`).
"""

from router.api import admin, inference, node, site
from router.edge import Handler

HANDLERS: dict[str, Handler] = {
    **admin.HANDLERS,
    **inference.HANDLERS,
    **site.HANDLERS,
    **node.HANDLERS,
}

__all__ = ["HANDLERS", "admin", "inference", "node", "site"]
