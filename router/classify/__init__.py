"""The route table: (method, path) -> the Route that says how the router treats a request.

`ROUTES` is data, read top to bottom. Exact templates are looked up in a dict first; templates
with parameters are tried in table order, so a family catch-all such as `/v1/{tail:.+}` sits
after every more specific `/v1/...` template (a test instantiates each template to prove no
earlier one shadows it). Several records may share one template when methods need different
handlers or flags. The first template that matches a path decides 404 vs 405, so a wrong method
on a known path is a 405 and never falls through to a catch-all.

`match(method, path) -> Match` is the interface: the Route, the path parameters
(`{"prompt_id": ...}`, `{"tail": ...}`) and the method; pure, raising RouteNotFound (404) or
MethodNotAllowed (405).
`python -m router.classify` prints the markdown table embedded in docs/routes.md.

The face of small modules: `model` (Route, Match and their vocabularies), `table` (the rows, as
data), `nodes` (the node copies of the management rows; `ROUTES`), `matching` (`match`) and
`markdown` (docs/routes.md's table).
"""

from router.classify.markdown import routes_markdown
from router.classify.matching import match
from router.classify.model import (
    FORM_SELECTOR,
    IMAGE_SELECTOR,
    NO_SELECTOR,
    QUERY_SELECTOR,
    READ_METHODS,
    TEXT_SELECTOR,
    BodyMode,
    Match,
    NamesNode,
    Route,
    SelectorRule,
)
from router.classify.nodes import NODE_CONTRACT_PATHS, ROUTES, management_path, node_path
from router.classify.table import TABLE, TEXT_FAMILIES

__all__ = [
    "FORM_SELECTOR",
    "IMAGE_SELECTOR",
    "NODE_CONTRACT_PATHS",
    "NO_SELECTOR",
    "QUERY_SELECTOR",
    "READ_METHODS",
    "ROUTES",
    "TABLE",
    "TEXT_FAMILIES",
    "TEXT_SELECTOR",
    "BodyMode",
    "Match",
    "NamesNode",
    "Route",
    "SelectorRule",
    "management_path",
    "match",
    "node_path",
    "routes_markdown",
]
