"""The route table as data: one row per (template, methods), read top to bottom (the face,
router/classify/__init__.py, says how a request is matched against it). The row builders
below give each kind of route its defaults; `TABLE` is every row a client may reach, and
router/classify/nodes.py adds the node copies of the management rows."""

from __future__ import annotations

from dataclasses import replace

from router.classify.model import (
    FORM_SELECTOR,
    IMAGE_SELECTOR,
    NO_SELECTOR,
    QUERY_SELECTOR,
    READ_METHODS,
    TEXT_SELECTOR,
    BodyMode,
    NamesNode,
    Route,
    SelectorRule,
)
from router.domain import Family, Lane, Role, Surface

# fmt: off
# ---- the table -------------------------------------------------------------------------------

_K, _L, _S, _W, _V = Family.KOBOLD, Family.LLAMACPP, Family.SDCPP, Family.WHISPERCPP, Family.VLLM
TEXT_FAMILIES = frozenset({_K, _L, _V})
_T, _I, _VO, _E, _MU = Lane.TEXT, Lane.IMAGE, Lane.VOICE, Lane.EMBEDDINGS, Lane.MUSIC
_J, _M, _N, _ST, _C = BodyMode.JSON, BodyMode.MULTIPART, BodyMode.NONE, BodyMode.STREAM, BodyMode.CONTROL
_ANY = "GET POST PUT PATCH DELETE"


def _r(
    template: str,
    methods: str,
    surface: Surface,
    lane: Lane | None,
    role: Role,
    handler: str = "proxy",
    *,
    sel: SelectorRule | None = None,
    body: BodyMode | None = None,
    fam: frozenset[Family] | set[Family] = frozenset(),
    strict: bool = False,
    vllm: bool = False,
    required: bool = False,
) -> Route:
    """Row builder: defaults follow the methods (GET-only rows have no body and read the query)."""
    mset = frozenset(methods.split())
    get_only = mset <= READ_METHODS
    if sel is None:
        sel = QUERY_SELECTOR if get_only else TEXT_SELECTOR
    return Route(
        template, mset, surface, lane, role, handler,
        selector=sel, body=body or (_N if get_only else _J), model_required=required,
        origin_strict=strict, vllm=vllm, served_by=frozenset(fam),
    )


def _inf(template: str, methods: str, surface: Surface, lane: Lane | None, **kw: object) -> Route:
    return _r(template, methods, surface, lane, Role.INFERENCE, **kw)  # type: ignore[arg-type]


def _admin(template: str, methods: str, handler: str, surface: Surface = Surface.SITE,
           body: BodyMode | None = None, **kw: object) -> Route:
    body = body or (_N if frozenset(methods.split()) <= READ_METHODS else _C)
    return _r(template, methods, surface, None, Role.ADMIN, handler, sel=NO_SELECTOR,
              body=body, **kw)  # type: ignore[arg-type]


def _addressed(
    template: str, methods: str, handler: str, surface: Surface = Surface.SITE,
    names: NamesNode = NamesNode.QUERY,
) -> Route:
    """A management call that names a node (`names`, the query's `node_id` by default)."""
    return replace(_admin(template, methods, handler, surface), names_node=names)


def _posted(template: str, methods: str, handler: str, surface: Surface = Surface.SITE) -> Route:
    """A management write whose JSON body's `node_id` (else the query's) names its node."""
    return _addressed(template, methods, handler, surface, NamesNode.BODY)


def _filtered(template: str, methods: str, handler: str) -> Route:
    """A management read over the nodes' records, filtered by repeated `node` / `node_id`."""
    return _addressed(template, methods, handler, names=NamesNode.FILTER)


def _keyed(template: str, methods: str, handler: str) -> Route:
    """A management call whose `node_id` is data for this router's own tables, never relayed."""
    return _addressed(template, methods, handler, names=NamesNode.KEY)


def _node(template: str, methods: str, handler: str, body: BodyMode | None = None) -> Route:
    body = body or (_N if frozenset(methods.split()) <= READ_METHODS else _C)
    return _r(template, methods, Surface.NODE, None, Role.CLUSTER, handler, sel=NO_SELECTOR,
              body=body)


def _vllm_op(op: str, methods: str) -> Route:
    """Operational vLLM paths, admin-only; the handler maps /router/v1/vllm/X to the runtime's /X."""
    return _r(f"/router/v1/vllm/{op}", methods, Surface.VLLM, None, Role.ADMIN, "vllm.admin",
              sel=QUERY_SELECTOR, body=_C if methods == "POST" else _N, fam={_V}, vllm=True)


OAI, A, KB, OL, LC = Surface.OPENAI, Surface.ANTHROPIC, Surface.KOBOLD, Surface.OLLAMA, Surface.LLAMACPP
EM, VL, VC, CF = Surface.EMBEDDINGS, Surface.VLLM, Surface.VOICE, Surface.COMFY

TABLE: tuple[Route, ...] = (
    # -- meta and discovery
    _r("/health", "GET", Surface.META, None, Role.PUBLIC, "meta.health", sel=NO_SELECTOR),
    _admin("/metrics", "GET", "meta.metrics", Surface.META),
    # The admin WebUI's static files: PUBLIC, they hold no data (its data routes are admin);
    # `/router/ui` redirects to `/router/ui/` (match() ignores one trailing '/').
    _r("/router/ui", "GET", Surface.META, None, Role.PUBLIC, "ui.serve", sel=NO_SELECTOR),
    _r("/router/ui/{tail:.*}", "GET", Surface.META, None, Role.PUBLIC, "ui.serve", sel=NO_SELECTOR),
    _inf("/v1/models", "GET", OAI, _T, handler="models.openai_list", sel=NO_SELECTOR, vllm=True),
    # Answered by the router: never forwarded, never loads a model.
    _inf("/v1/health", "GET", OAI, None, handler="meta.health", sel=NO_SELECTOR, vllm=True),
    _inf("/v1/models/{model_id}", "GET", OAI, _T, handler="models.openai_get", sel=NO_SELECTOR, vllm=True),
    _inf("/sdapi/v1/sd-models", "GET", Surface.A1111, _I, handler="models.sd_list", sel=NO_SELECTOR),
    _admin("/router/v1/models", "GET", "models.router_list", Surface.CONTROL),
    # This table as OpenAPI 3.1 (router/openapi/), for an admin's tools.
    _admin("/router/v1/openapi.json", "GET", "meta.openapi", Surface.CONTROL),
    # -- explicit control
    _admin("/router/v1/load", "POST", "control.load", Surface.CONTROL),
    _admin("/router/v1/unload", "POST", "control.unload", Surface.CONTROL),
    _admin("/router/v1/shutdown", "POST", "control.shutdown", Surface.CONTROL),
    _admin("/router/v1/events", "GET", "control.events", Surface.CONTROL),
    _admin("/router/v1/status", "GET", "control.status", Surface.CONTROL),
    # Scoped keys (docs/configuration.md, "Scoped keys"): this router's own table, never relayed.
    _admin("/router/v1/keys", "GET", "keys.list", Surface.CONTROL),
    _admin("/router/v1/keys", "POST", "keys.create", Surface.CONTROL),
    _admin("/router/v1/keys/{name}", "PATCH", "keys.change", Surface.CONTROL),
    _admin("/router/v1/keys/{name}", "DELETE", "keys.revoke", Surface.CONTROL),
    _addressed("/router/v1/benchmarks", "GET", "bench.list", Surface.CONTROL),
    _posted("/router/v1/benchmarks/run", "POST", "bench.run", Surface.CONTROL),
    # -- the admin WebUI's sign-in: public (a browser without a credential asks here)
    _r("/router/v1/ui/session", "GET", Surface.CONTROL, None, Role.PUBLIC, "ui.session", sel=NO_SELECTOR),
    _r("/router/v1/ui/session", "POST", Surface.CONTROL, None, Role.PUBLIC, "ui.login", sel=NO_SELECTOR, body=_C),
    _r("/router/v1/ui/session", "DELETE", Surface.CONTROL, None, Role.PUBLIC, "ui.logout", sel=NO_SELECTOR, body=_C),
    # -- operational vLLM (admin); anything else under /router/v1/vllm/ is a 404
    _vllm_op("health", "GET"), _vllm_op("version", "GET"), _vllm_op("load", "GET"),
    _vllm_op("metrics", "GET"), _vllm_op("tokenizer_info", "GET"),
    _vllm_op("load_lora_adapter", "POST"), _vllm_op("unload_lora_adapter", "POST"),
    _vllm_op("scale_elastic_ep", "POST"), _vllm_op("is_scaling_elastic_ep", "POST"),
    # -- site management (admin)
    _addressed("/router/v1/site/inventory", "GET", "site.inventory"),
    _addressed("/router/v1/site/nodes/state", "GET", "site.nodes_state"),
    _posted("/router/v1/site/nodes/unload", "POST", "site.nodes_unload"),
    _posted("/router/v1/site/nodes/backends/init", "POST", "site.backends_init"),
    _posted("/router/v1/site/nodes/backends/init/cancel", "POST", "site.backends_init_cancel"),
    _addressed("/router/v1/site/nodes/backends/init", "GET", "site.backends_init_status"),
    _addressed("/router/v1/site/nodes/backends/init/{job_id}", "GET", "site.backends_init_job"),
    _addressed("/router/v1/site/nodes/backends/init/{job_id}/output", "GET", "site.backends_init_output"),
    _addressed("/router/v1/site/nodes/backends/init/{job_id}/events", "GET", "site.backends_init_events"),
    _addressed("/router/v1/site/nodes/backends/launch-options", "GET", "site.launch_options"),
    _posted("/router/v1/site/nodes/backends/launch-options", "POST", "site.launch_options_set"),
    # downloads (docs/downloads.md)
    _addressed("/router/v1/site/download", "GET", "site.download_capabilities"),
    _addressed("/router/v1/site/download/capabilities", "GET", "site.download_capabilities"),
    _posted("/router/v1/site/download/search", "POST", "site.download_search"),
    _posted("/router/v1/site/download/search-page", "POST", "site.download_search"),
    _posted("/router/v1/site/download/repository", "POST", "site.download_repository"),
    _posted("/router/v1/site/download/plan", "POST", "site.download_plan"),
    _posted("/router/v1/site/download/rescan", "POST", "site.download_rescan"),
    _addressed("/router/v1/site/download/library", "GET", "site.download_library"),
    _posted("/router/v1/site/download/jobs", "POST", "site.download_start"),
    _addressed("/router/v1/site/download/jobs/{job_id}", "GET", "site.download_job"),
    _addressed("/router/v1/site/download/jobs/{job_id}/events", "GET", "site.download_events"),
    _posted("/router/v1/site/download/jobs/{job_id}/pause", "POST", "site.download_pause"),
    _posted("/router/v1/site/download/jobs/{job_id}/resume", "POST", "site.download_resume"),
    _posted("/router/v1/site/download/jobs/{job_id}/cancel", "POST", "site.download_cancel"),
    # backend WebUIs (docs/webuis.md)
    _addressed("/router/v1/site/webuis", "GET", "site.webuis_list"),
    _posted("/router/v1/site/webuis/session", "POST", "site.webuis_session"),
    _posted("/router/v1/site/webuis/load", "POST", "site.webuis_load"),
    _keyed("/router/v1/site/routing-groups", "GET POST DELETE", "site.routing_groups"),
    _keyed("/router/v1/site/text-routing-groups", "GET POST DELETE", "site.text_routing_groups"),
    _admin("/router/v1/site/offload/summary", "GET", "site.offload_summary"),
    _admin("/router/v1/site/guardian-models", "GET POST DELETE", "site.guardian_models"),
    _admin("/router/v1/site/offload/settings", "GET POST DELETE", "site.offload_settings"),
    _addressed("/router/v1/site/offload/decisions", "GET", "site.offload_decisions"),
    _filtered("/router/v1/site/analytics", "GET", "site.analytics"),
    _filtered("/router/v1/site/analytics/flush", "POST", "site.analytics_flush"),
    _addressed("/router/v1/site/store/download", "GET", "site.store_download"),
    _filtered("/router/v1/site/load-captures", "GET", "site.load_captures"),
    _filtered("/router/v1/site/load-captures/{attempt_id}", "GET", "site.load_capture"),
    _filtered("/router/v1/site/load-captures/{attempt_id}/output", "GET", "site.load_capture_output"),
    _filtered("/router/v1/site/load-errors", "GET", "site.load_errors"),
    _filtered("/router/v1/site/load-errors", "DELETE", "site.load_errors_clear"),
    _admin("/router/v1/site/models/state", "GET", "site.models_state"),
    _posted("/router/v1/site/models/state", "POST", "site.models_state_set"),
    # `.kcpps` writers (docs/site.md)
    _posted("/router/v1/site/cook/preview", "POST", "site.cook_preview"),
    _posted("/router/v1/site/cook/apply", "POST", "site.cook_apply"),
    _posted("/router/v1/site/cook/{cook_id}", "DELETE", "site.cook_delete"),
    _posted("/router/v1/site/config-file", "DELETE", "site.config_file_delete"),
    _posted("/router/v1/site/config-file/preview", "POST", "site.config_file_preview"),
    _posted("/router/v1/site/config-file/apply", "POST", "site.config_file_apply"),
    _addressed("/router/v1/site/config-file/{config_id}", "GET", "site.config_file_read"),
    # model files and portable assets (docs/site.md, "Model assets")
    _posted("/router/v1/site/model-files/hash", "POST", "site.model_file_hash"),
    _posted("/router/v1/site/model-assets/export", "POST", "site.assets_export"),
    _posted("/router/v1/site/model-assets/resolve", "POST", "site.assets_resolve"),
    _posted("/router/v1/site/model-assets/resolve-batch", "POST", "site.assets_resolve_batch"),
    _posted("/router/v1/site/model-assets/import", "POST", "site.assets_import"),
    _posted("/router/v1/site/model-assets/candidates", "POST", "site.assets_candidates"),
    _posted("/router/v1/site/model-assets/bind", "POST", "site.assets_bind"),
    _posted("/router/v1/site/model-assets/substitute", "POST", "site.assets_substitute"),
    _posted("/router/v1/site/model-assets/jobs", "POST", "site.assets_job_start"),
    _addressed("/router/v1/site/model-assets/jobs/{job_id}", "GET", "site.assets_job"),
    _addressed("/router/v1/site/model-assets/{sha256}", "GET", "site.assets_hash"),
    # -- backend WebUIs: an admin's navigation, answered with a ticket redirect (docs/webuis.md)
    _admin("/router/webuis/{kind}", "GET", "webuis.open"),
    _admin("/router/webuis/{kind}/{tail:.+}", "GET", "webuis.open"),
    # -- cluster (cluster token only); the node's own site rows follow the table (NODE_SITE)
    _node("/router/v1/node/models", "GET", "node.models"),
    _node("/router/v1/node/register", "POST", "node.register"),
    _node("/router/v1/node/runtime-status", "GET", "node.runtime_status"),
    _node("/router/v1/node/state", "GET", "node.state"),
    _node("/router/v1/node/load", "POST", "control.load"),
    _node("/router/v1/node/unload", "POST", "control.unload"),
    _node("/router/v1/node/offload/settings", "GET", "node.offload_settings"),
    _node("/router/v1/node/offload/settings", "POST", "node.offload_settings_set"),
    _node("/router/v1/node/routing-links", "GET", "node.routing_links"),
    _node("/router/v1/node/routing-links", "POST", "node.routing_links_set"),
    # Pooled memory (docs/cluster.md): the master's RPC leases on a lending node.
    _node("/router/v1/node/rpc/leases", "GET", "node.rpc_leases"),
    _node("/router/v1/node/rpc/leases", "POST", "node.rpc_lease"),
    _node("/router/v1/node/rpc/leases/{lease_id}/renew", "POST", "node.rpc_renew"),
    _node("/router/v1/node/rpc/leases/{lease_id}/release", "POST", "node.rpc_release"),
    _node("/router/v1/node/rpc/leases/{lease_id}/reclaim", "POST", "node.rpc_reclaim"),
    # A client request the master relays here: the inner path is classified by this same table.
    _node("/router/v1/node/inference/{path:.+}", _ANY, "node.inference", body=_ST),
    # -- OpenAI and Anthropic text
    _inf("/v1/chat/completions", "POST", OAI, _T, fam=TEXT_FAMILIES, vllm=True, required=True),
    _inf("/v1/completions", "POST", OAI, _T, fam=TEXT_FAMILIES, vllm=True, required=True),
    _inf("/v1/chat/completions/batch", "POST", OAI, _T, fam={_V}, vllm=True),
    _inf("/v1/chat/completions/render", "POST", OAI, _T, fam={_V}, vllm=True),
    _inf("/v1/chat/completions/input_tokens", "POST", OAI, _T, fam={_L}),
    _inf("/v1/completions/render", "POST", OAI, _T, fam={_V}, vllm=True),
    _inf("/v1/responses", "POST", OAI, _T, handler="responses.create", fam=TEXT_FAMILIES, vllm=True),
    _inf("/v1/responses/input_tokens", "POST", OAI, _T, fam={_L}),
    _inf("/v1/responses/render", "POST", OAI, _T, fam={_V}, vllm=True, required=True),
    _inf("/v1/responses/{id}", "GET", OAI, _T, handler="responses.follow", fam={_V}, vllm=True),
    _inf("/v1/responses/{id}", "DELETE", OAI, _T, handler="responses.follow", sel=QUERY_SELECTOR, body=_N, fam={_K, _L}),
    _inf("/v1/responses/{id}/cancel", "POST", OAI, _T, handler="responses.follow", fam={_V}, vllm=True),
    _inf("/v1/messages", "POST", A, _T, handler="anthropic.messages", fam=TEXT_FAMILIES, vllm=True),
    _inf("/v1/messages/count_tokens", "POST", A, _T, fam={_L, _V}, vllm=True),
    _inf("/v1/messages/render", "POST", A, _T, fam={_V}, vllm=True, required=True),
    _inf("/cohere/v2/chat/render", "POST", VL, _T, fam={_V}, vllm=True, required=True),
    _inf("/generative_scoring", "POST", VL, _T, fam={_V}, vllm=True, strict=True),
    _inf("/invocations", "POST", VL, _T, fam={_V}, vllm=True, strict=True),
    # -- Kobold text
    _inf("/api/v1/generate", "POST", KB, _T, fam={_K}),
    _inf("/api/extra/generate/stream", "POST", KB, _T, fam={_K}),
    _inf("/api/extra/tokencount", "POST", KB, _T, fam={_K}),
    # -- Ollama (router-local: synthesized lists, or translation when the backend lacks Ollama)
    _inf("/api/tags", "GET", OL, _T, handler="ollama.tags", sel=NO_SELECTOR, strict=True, vllm=True),
    _inf("/api/ps", "GET", OL, _T, handler="ollama.ps", sel=NO_SELECTOR, strict=True, vllm=True),
    _inf("/api/version", "GET", OL, None, handler="ollama.version", sel=NO_SELECTOR, strict=True, vllm=True),
    _inf("/api/show", "POST", OL, _T, handler="ollama.show", strict=True, vllm=True),
    _inf("/api/chat", "POST", OL, _T, handler="ollama.chat", fam=TEXT_FAMILIES, strict=True, vllm=True),
    _inf("/api/generate", "POST", OL, _T, handler="ollama.generate", fam=TEXT_FAMILIES, strict=True, vllm=True),
    _inf("/api/embed", "POST", OL, _E, handler="ollama.embed", fam={_K, _L, _V}, strict=True, vllm=True),
    _inf("/api/embeddings", "POST", OL, _E, handler="ollama.embeddings", fam={_K, _L, _V}, strict=True, vllm=True),
    # Ollama's liveness probe (`ollama` CLI heartbeat): public, as /health.
    _r("/", "GET", OL, None, Role.PUBLIC, "ollama.root", sel=NO_SELECTOR, strict=True),
    # Ollama's model management: pull downloads `hf.co/...` GGUFs into the model folder (admin,
    # as every download); the others answer in Ollama's shape what the router does instead.
    _r("/api/pull", "POST", OL, None, Role.ADMIN, "ollama.pull", sel=NO_SELECTOR, body=_C, strict=True, vllm=True),
    _inf("/api/push", "POST", OL, None, handler="ollama.manage", sel=NO_SELECTOR, body=_C, strict=True, vllm=True),
    _inf("/api/copy", "POST", OL, None, handler="ollama.manage", sel=NO_SELECTOR, body=_C, strict=True, vllm=True),
    _inf("/api/create", "POST", OL, None, handler="ollama.manage", sel=NO_SELECTOR, body=_C, strict=True, vllm=True),
    _inf("/api/delete", "DELETE", OL, None, handler="ollama.manage", sel=NO_SELECTOR, body=_C, strict=True, vllm=True),
    # -- llama-server's own API (Origin checked on every method); /slots/{id} actions are a 404
    _inf("/completion", "POST", LC, _T, fam={_L}, strict=True),
    _inf("/completions", "POST", LC, _T, fam={_L, _K}, strict=True),
    _inf("/tokenize", "POST", LC, _T, fam={_L, _V}, strict=True, vllm=True),
    _inf("/detokenize", "POST", LC, _T, fam={_L, _V}, strict=True, vllm=True),
    _inf("/props", "GET", LC, _T, fam={_L, _K}, strict=True),
    # Slots describe other clients' requests, so only an admin may read them.
    _r("/slots", "GET", LC, _T, Role.ADMIN, fam={_L, _K}, strict=True),
    _inf("/infill", "POST", LC, _T, fam={_L}, strict=True),
    _inf("/apply-template", "POST", LC, _T, fam={_L}, strict=True),
    _inf("/embedding", "POST", LC, _E, fam={_L}, strict=True),
    _inf("/embeddings", "POST", LC, _E, fam={_L}, strict=True),
    # -- embeddings, rerank, pooling
    _inf("/v1/embeddings", "POST", EM, _E, fam={_K, _L, _V}, vllm=True),
    _inf("/v2/embed", "POST", EM, _E, fam={_V}, vllm=True),
    _inf("/api/extra/embeddings", "POST", KB, _E, fam={_K}),
    _inf("/rerank", "POST", EM, _E, fam={_L, _V}, strict=True, vllm=True),
    _inf("/v1/rerank", "POST", EM, _E, fam={_L, _V}, vllm=True),
    _inf("/v1/reranking", "POST", EM, _E, fam={_L}),
    _inf("/v2/rerank", "POST", EM, _E, fam={_V}, vllm=True),
    _inf("/classify", "POST", EM, _E, fam={_V}, strict=True, vllm=True),
    _inf("/score", "POST", EM, _E, fam={_V}, strict=True, vllm=True),
    _inf("/v1/score", "POST", EM, _E, fam={_V}, vllm=True),
    _inf("/pooling", "POST", EM, _E, fam={_V}, strict=True, vllm=True),
    # -- voice
    _inf("/v1/audio/speech", "POST", VC, _VO, handler="voice.speech", fam={_K}),
    _inf("/v1/audio/transcriptions", "POST", VC, _VO, handler="voice.transcriptions", sel=FORM_SELECTOR, body=_M, fam={_K, _W, _V}, vllm=True),
    _inf("/v1/audio/translations", "POST", VC, _VO, handler="voice.translations", sel=FORM_SELECTOR, body=_M, fam={_W, _V}, vllm=True),
    _inf("/v1/audio/voices", "GET", VC, _VO, handler="voice.speech", fam={_K}),
    _inf("/audio/voices", "GET", VC, _VO, handler="voice.speech", fam={_K}),
    _inf("/api/extra/tts", "POST", VC, _VO, handler="voice.speech", fam={_K}),
    _inf("/api/extra/transcribe", "POST", VC, _VO, handler="voice.transcribe", sel=FORM_SELECTOR, fam={_K, _W}),
    _inf("/v1/realtime", "GET", OAI, _VO, handler="realtime.connect", body=_ST, fam={_V}, vllm=True),
    # -- images: OpenAI, A1111, sd.cpp native, ComfyUI
    _inf("/v1/images/{tail:.+}", "GET POST", OAI, _I, handler="images.forward", sel=IMAGE_SELECTOR, fam={_K, _S}),
    _inf("/sdapi/v1/options", "GET POST", Surface.A1111, _I, handler="sdapi.options", sel=NO_SELECTOR, body=_C),
    _inf("/sdapi/v1/refresh-checkpoints", "POST", Surface.A1111, _I, handler="sdapi.refresh", sel=NO_SELECTOR, body=_C),
    _inf("/sdapi/v1/{tail:.+}", "GET POST", Surface.A1111, _I, handler="images.forward", sel=IMAGE_SELECTOR, fam={_K, _S}),
    _inf("/sdcpp/v1/{tail:.+}", "GET POST", Surface.SDCPP, _I, handler="images.forward", sel=IMAGE_SELECTOR, fam={_S}),
    _inf("/prompt", "GET POST", CF, _I, handler="comfy.prompt", sel=IMAGE_SELECTOR, fam={_K}),
    _inf("/queue", "GET POST", CF, _I, sel=IMAGE_SELECTOR, fam={_K}),
    _inf("/history", "GET POST", CF, _I, handler="comfy.history", sel=IMAGE_SELECTOR, fam={_K}),
    _inf("/history/{prompt_id}", "GET", CF, _I, handler="comfy.history", fam={_K}),
    _inf("/view", "GET", CF, _I, handler="comfy.view", fam={_K}),
    _inf("/view/{tail:.+}", "GET", CF, _I, handler="comfy.view", fam={_K}),
    _inf("/object_info", "GET", CF, _I, fam={_K}),
    _inf("/object_info/{tail:.+}", "GET", CF, _I, fam={_K}),
    _inf("/system_stats", "GET", CF, _I, fam={_K}),
    _inf("/interrupt", "POST", CF, _I, sel=IMAGE_SELECTOR, fam={_K}),
    _inf("/upload/image", "POST", CF, _I, handler="comfy.upload", sel=IMAGE_SELECTOR, body=_M, fam={_K}),
    # Sub-paths are the same upload (docs/decisions.md, "ComfyUI upload sub-paths").
    _inf("/upload/image/{tail:.*}", "POST", CF, _I, handler="comfy.upload", sel=IMAGE_SELECTOR, body=_M, fam={_K}),
    # -- music
    _inf("/musicui", "GET", Surface.MUSIC, _MU, fam={_K}),
    _inf("/musicui/{tail:.+}", "GET POST", Surface.MUSIC, _MU, fam={_K}),
    _inf("/api/extra/music/{tail:.+}", "GET POST", Surface.MUSIC, _MU, fam={_K}),
    # -- generic text catch-all: after every more specific /v1 rule; not on vLLM's allowlist
    _inf("/v1", _ANY, OAI, _T, fam={_K, _L}),
    _inf("/v1/{tail:.+}", _ANY, OAI, _T, fam={_K, _L}),
)
# fmt: on
