"""What a row of the route table says (`Route`), what a classified request is (`Match`), and the
vocabularies a row uses: where a model selector is found (`SelectorRule`), what the body is
(`BodyMode`), whether and where a management call names a node (`NamesNode`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from router.domain import Family, Lane, Role, Surface

# The methods a route declares that change nothing. Not the edge's SAFE_METHODS, which also
# lets OPTIONS (a browser's preflight, never a declared route method) past the Origin rule.
READ_METHODS = frozenset({"GET", "HEAD"})


class NamesNode(StrEnum):
    """Where a management call names a node, and what the name does (docs/architecture.md,
    "A call that names a node"). The dispatcher acts on it before the handler runs
    (router/api/node/site_relay.py); a handler of such a row never meets another node."""

    NO = ""  # names no node (falsy)
    QUERY = "query"  # the query's `node_id` is the node that answers
    BODY = "body"  # the JSON body's `node_id` (else the query's): the body is read once first
    # Repeated `node` / `node_id` query filters over the nodes' records: one other node named is
    # relayed there; none or several reach the handler (a master's FANOUT merges the nodes).
    FILTER = "filter"
    # The query's `node_id` is data: a model's node in this router's own tables (routing
    # groups); never resolved nor relayed, the handler reads it (`node_named`).
    KEY = "key"


class BodyMode(StrEnum):
    """What the request body is, for size caps and for whether the selector reads it."""

    NONE = "none"  # no body expected; the selector never reads one
    JSON = "json"  # JSON (or multipart, by Content-Type) scanned for the selector, then replayed
    MULTIPART = "multipart"  # multipart/form-data uploads (audio, reference images)
    STREAM = "stream"  # opaque bytes or a WebSocket, forwarded as they come
    CONTROL = "control"  # small JSON the router's own handler parses (max_control_body_mb)


@dataclass(frozen=True, slots=True)
class SelectorRule:
    """Where a model selector may be found; earlier entries win within each source.

    Sources are consulted body first (JSON keys or the multipart field, chosen by Content-Type),
    then the query, then the `X-Tensors-Model` header (router/forwarding/selector.py).
    """

    json_keys: tuple[str, ...] = ()  # dotted paths into the top-level JSON object
    query: tuple[str, ...] = ()
    header: bool = False
    multipart_field: str | None = None

    @property
    def reads_body(self) -> bool:
        return bool(self.json_keys or self.multipart_field)

    def describe(self) -> str:
        parts = [f"json `{k}`" for k in self.json_keys]
        parts += [f"form `{self.multipart_field}`"] if self.multipart_field else []
        parts += [f"query `{q}`" for q in self.query]
        parts += ["header"] if self.header else []
        return ", ".join(parts) or "-"


NO_SELECTOR = SelectorRule()
QUERY_SELECTOR = SelectorRule(query=("model",), header=True)
TEXT_SELECTOR = SelectorRule(json_keys=("model",), query=("model",), header=True)
FORM_SELECTOR = SelectorRule(
    json_keys=("model",), query=("model",), header=True, multipart_field="model"
)
IMAGE_SELECTOR = SelectorRule(
    json_keys=("model", "sd_model_checkpoint", "override_settings.sd_model_checkpoint"),
    query=("model", "sd_model_checkpoint"),
    header=True,
    multipart_field="model",
)


@dataclass(frozen=True, slots=True)
class Route:
    """One row of the table. `handler` is "proxy" or the dotted name of a router-local handler."""

    template: str
    methods: frozenset[str]
    surface: Surface
    lane: Lane | None
    role: Role
    handler: str = "proxy"
    selector: SelectorRule = NO_SELECTOR
    body: BodyMode = BodyMode.NONE
    model_required: bool = False
    origin_strict: bool = False  # Ollama / llama-server style: Origin checked on every method
    vllm: bool = False  # usable on a vLLM runtime (its strict allowlist, or the router's handler)
    # Native families that implement the path; empty = the router answers without a backend.
    served_by: frozenset[Family] = frozenset()
    # Whether and where the call names a node: the dispatcher resolves it before the handler
    # runs (router/app.py), and a master relays a call for another node to that node.
    names_node: NamesNode = NamesNode.NO
    # True when any declared method is unsafe; Match.state_changing decides per request.
    state_changing: bool = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "state_changing", not self.methods <= READ_METHODS)

    @property
    def allowed(self) -> frozenset[str]:
        """Declared methods plus HEAD wherever GET is allowed."""
        return self.methods | {"HEAD"} if "GET" in self.methods else self.methods


@dataclass(frozen=True, slots=True)
class Match:
    """A classified request: its Route, the template's path parameters, and the method."""

    route: Route
    params: Mapping[str, str]
    method: str

    @property
    def state_changing(self) -> bool:
        return self.method not in READ_METHODS
