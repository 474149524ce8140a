"""One description entry per handler name of the route table (router/classify ROUTES).

`ENTRIES[handler]` says what the operations of every row with that handler take and answer; the
builder (router/openapi/build.py) walks ROUTES, so a new row with a known handler is described at
once, and a row whose handler has no entry fails tests/openapi/test_openapi_document.py.
Forwarded handlers (`forwarded=True`) are described loosely: any JSON request, the backend's
answer passed through; the router's own refusals on them are still in its error shape.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from router.openapi import key_shapes as k
from router.openapi import shapes as s
from router.openapi.answers import (
    ANY_REQUEST,
    EVENTS,
    HTML_OR_ASSET,
    JSON_ANY,
    JSON_OBJECT,
    JSON_REQUEST,
    METRICS,
    NO_CONTENT,
    PASSTHROUGH,
    REDIRECT,
    TEXT,
    Answer,
    json_of,
    json_schema,
)

# The site API answers JSON objects whose fields docs/site.md lists; an admin's JSON
# request (its fields checked by the handler, which answers 400 naming a wrong one).
CONTROL_REQUEST = json_schema({"type": "object"}, "A JSON object (fields: docs/site.md)")


@dataclass(frozen=True, slots=True)
class Query:
    """A query parameter the handler reads (besides the route's model selector)."""

    name: str
    description: str
    required: bool = False


NODE = Query("node_id", "the node to act on (default this node; another is a 404 on a standalone)")


@dataclass(frozen=True, slots=True)
class Entry:
    summary: str
    # status -> body for every method of the row, unless `by_method` names the method
    ok: Mapping[str, Answer] = field(default_factory=lambda: {"200": JSON_OBJECT})
    by_method: Mapping[str, Mapping[str, Answer]] = field(default_factory=dict)
    request: Answer | None = None  # the body of a method that sends one (None: by BodyMode)
    forwarded: bool = False
    query: tuple[Query, ...] = ()

    def answers(self, method: str) -> Mapping[str, Answer]:
        return self.by_method.get(method, self.ok)


_PULL = Answer(
    "Ollama's pull progress: `{status, digest?, total?, completed?}` records, the last "
    '`{"status": "success"}`',
    {"application/x-ndjson": {"type": "string"}, "application/json": {"type": "object"}},
)


def _ok(answer: Answer) -> Mapping[str, Answer]:
    return {"200": answer}


def _fwd(summary: str, **kw: object) -> Entry:
    return Entry(summary, _ok(PASSTHROUGH), forwarded=True, **kw)  # type: ignore[arg-type]


def _site(summary: str, answer: Answer = JSON_OBJECT, **kw: object) -> Entry:
    return Entry(summary, _ok(answer), **kw)  # type: ignore[arg-type]


_NODE_SITE = Answer(
    "What the site route answers: JSON, events for `/events`, the SQLite file for store/download",
    {
        "application/json": {},
        "text/event-stream": {"type": "string"},
        "application/vnd.sqlite3": {},
    },
)

ENTRIES: Mapping[str, Entry] = {
    # -- meta
    "meta.health": Entry("Liveness: the router answers", _ok(json_of(s.Health))),
    "meta.metrics": Entry("Prometheus metrics", _ok(METRICS)),
    "meta.openapi": Entry("This description (OpenAPI 3.1)", _ok(JSON_OBJECT)),
    "ui.serve": Entry(
        "The admin WebUI's files (`/router/ui` redirects to `/router/ui/`)",
        {"200": HTML_OR_ASSET, "308": REDIRECT},
    ),
    # -- model discovery, answered from the catalog
    "models.openai_list": Entry(
        "Text and embedding models (OpenAI)", _ok(json_of(s.OpenAIModelList))
    ),
    "models.openai_get": Entry("One model (OpenAI)", _ok(json_of(s.OpenAIModel))),
    "models.sd_list": Entry(
        "Image models (A1111)", _ok(json_of(s.SdModel, "Image models", many=True))
    ),
    "models.router_list": Entry("Every configuration, with state", _ok(json_of(s.RouterModelList))),
    # -- explicit control
    "control.load": Entry(
        "Load a model, or say what a load would do (dry run)",
        _ok(json_of(s.LoadAnswer)),
        request=json_of(s.LoadRequest),
    ),
    "control.unload": Entry(
        "Unload a lane, or all", _ok(json_of(s.Unloaded)), request=json_of(s.UnloadRequest)
    ),
    "control.shutdown": Entry("Stop the router gracefully", _ok(json_of(s.ShuttingDown))),
    "control.events": Entry("Runtime and request events", _ok(EVENTS)),
    "control.status": Entry("Runtimes and queues", _ok(json_of(s.Status))),
    "keys.list": Entry(
        "Scoped keys, with today's token use (never a secret)", _ok(json_of(k.KeyList))
    ),
    "keys.create": Entry(
        "Create a scoped key: the answer holds its secret, once",
        {"201": json_of(k.KeyCreated)},
        request=json_of(k.KeyRequest),
    ),
    "keys.change": Entry(
        "Change a scoped key's models, class, cap or quota",
        _ok(json_of(k.Key)),
        request=json_of(k.KeyChange),
    ),
    "keys.revoke": Entry(
        "Revoke a scoped key: its next request is a 401", _ok(json_of(k.KeyRevoked))
    ),
    "bench.list": _site(
        "Benchmark runs of one model",
        query=(Query("model_id", "the model", required=True), Query("limit", "most runs")),
    ),
    "bench.run": _site("Run a benchmark (loads the model)", request=CONTROL_REQUEST),
    "ui.session": Entry("The WebUI session's state", _ok(json_of(s.UiSession))),
    "ui.login": Entry(
        "Sign in to the WebUI", _ok(json_of(s.UiSession)), request=json_of(s.UiLogin)
    ),
    "ui.logout": Entry("Sign out of the WebUI", {"204": NO_CONTENT}),
    "vllm.admin": _fwd("A vLLM runtime's operational path (`/router/v1/vllm/X` -> `/X`)"),
    # -- site management
    "site.inventory": _site("This node's models, files and runtimes"),
    "site.nodes_state": _site("This node's state", json_of(s.NodesState)),
    "site.nodes_unload": _site("Unload on a node", request=json_of(s.NodesUnload)),
    "site.backends_init": _site(
        "Start a backend init job (builds backends)", request=CONTROL_REQUEST
    ),
    "site.backends_init_cancel": _site(
        "Cancel the backend init job", request=json_of(s.BackendRef)
    ),
    "site.backends_init_status": _site(
        "Native backends and their init jobs", json_of(s.BackendsInit)
    ),
    "site.backends_init_job": _site("One backend init job"),
    "site.backends_init_output": _site("One backend init job's output"),
    "site.backends_init_events": _site("One backend init job's progress", EVENTS),
    "site.launch_options": _site(
        "Backend launch options",
        query=(NODE, Query("backend_id", "the backend (vllm)", required=True)),
    ),
    "site.launch_options_set": _site(
        "Set backend launch options", request=json_of(s.LaunchOptionsSet)
    ),
    "site.routing_groups": _site(
        "Image routing groups",
        request=CONTROL_REQUEST,
        query=(NODE, Query("model_id", "the model")),
    ),
    "site.text_routing_groups": _site(
        "Text routing groups", request=CONTROL_REQUEST, query=(NODE, Query("model_id", "the model"))
    ),
    "site.offload_summary": _site("Offload (lending) summary"),
    "site.guardian_models": _site(
        "Guardian models (docs/guardians.md)",
        request=json_of(s.GuardianAssignment),
        query=(Query("scope", "DELETE: cluster, node or model"), NODE, Query("model_id", "DELETE")),
    ),
    "site.offload_settings": _site(
        "Offload (lending) settings", request=json_of(s.OffloadSettingsRequest)
    ),
    "site.offload_decisions": _site("Recent offload decisions", json_of(s.OffloadDecisions)),
    "site.analytics": _site(
        "Request analytics",
        query=(
            Query("range", "a named range (1h, 24h, 7d, ...)"),
            Query("model", "one model"),
            NODE,
        ),
    ),
    "site.analytics_flush": _site("Flush buffered analytics to the store", request=CONTROL_REQUEST),
    "site.store_download": _site(
        "A copy of the analytics database",
        Answer("The SQLite file", {"application/vnd.sqlite3": {}}),
    ),
    "site.load_captures": _site(
        "Load captures (backend output of load attempts)",
        json_of(s.LoadCaptures),
        query=(
            Query("kind", "load or probe"),
            Query("status", "outcome"),
            Query("backend", "family"),
            Query("cursor", "the next page"),
            Query("limit", "page size"),
            NODE,
        ),
    ),
    "site.load_capture": _site("One load capture"),
    "site.load_capture_output": _site("One load capture's output"),
    "site.load_errors": _site("Recent load errors", json_of(s.LoadErrors)),
    "site.load_errors_clear": _site("Clear the load errors", request=CONTROL_REQUEST),
    "site.models_state": Entry("Disabled models", _ok(json_of(s.ModelsState))),
    "site.models_state_set": Entry(
        "Disable or enable a model",
        _ok(json_of(s.ModelsStateSet)),
        request=json_of(s.ModelsStateRequest),
    ),
    # downloads (docs/downloads.md)
    "site.download_capabilities": _site("What this node can download (hub reachability, roots)"),
    "site.download_search": _site("Search the hub", request=CONTROL_REQUEST),
    "site.download_repository": _site("One hub repository's files", request=CONTROL_REQUEST),
    "site.download_plan": _site("Plan a download (files, sizes, target)", request=CONTROL_REQUEST),
    "site.download_rescan": _site("Rescan the model roots", request=CONTROL_REQUEST),
    "site.download_library": _site("Downloaded models"),
    "site.download_start": _site("Start a download job", request=CONTROL_REQUEST),
    "site.download_job": _site("One download job"),
    "site.download_events": _site("One download job's progress", EVENTS),
    "site.download_pause": _site("Pause a download job", request=CONTROL_REQUEST),
    "site.download_resume": _site("Resume a download job", request=CONTROL_REQUEST),
    "site.download_cancel": _site("Cancel a download job", request=CONTROL_REQUEST),
    # backend WebUIs (docs/webuis.md)
    "site.webuis_list": _site("Backend WebUI kinds this node offers"),
    "site.webuis_session": _site("Enable or disable a WebUI kind", request=CONTROL_REQUEST),
    "site.webuis_load": _site("Load a model for a WebUI kind", request=CONTROL_REQUEST),
    # configuration files (docs/site.md)
    "site.cook_preview": _site("Preview a cooked .kcpps", request=CONTROL_REQUEST),
    "site.cook_apply": _site("Write a cooked .kcpps", request=CONTROL_REQUEST),
    "site.cook_delete": _site("Delete a cooked .kcpps", request=CONTROL_REQUEST),
    "site.config_file_read": _site("Read a .kcpps file"),
    "site.config_file_preview": _site("Preview a .kcpps edit", request=CONTROL_REQUEST),
    "site.config_file_apply": _site("Write a .kcpps file", request=CONTROL_REQUEST),
    "site.config_file_delete": _site("Delete a .kcpps file", request=CONTROL_REQUEST),
    # model files and assets (projectors, VAEs, ...)
    "site.model_file_hash": _site("Hash a model file", request=CONTROL_REQUEST),
    "site.assets_export": _site("Export a model's assets", request=CONTROL_REQUEST),
    "site.assets_resolve": _site("Resolve an asset by hash", request=CONTROL_REQUEST),
    "site.assets_resolve_batch": _site("Resolve assets by hash", request=CONTROL_REQUEST),
    "site.assets_import": _site("Import assets", request=CONTROL_REQUEST),
    "site.assets_candidates": _site("Candidate files for an asset", request=CONTROL_REQUEST),
    "site.assets_bind": _site("Bind an asset to a configuration", request=CONTROL_REQUEST),
    "site.assets_substitute": _site("Substitute an asset", request=CONTROL_REQUEST),
    "site.assets_job_start": _site("Start an asset job (a download)", request=CONTROL_REQUEST),
    "site.assets_job": _site("One asset job"),
    "site.assets_hash": _site("One asset, by its SHA-256"),
    "webuis.open": Entry(
        "Open a backend's WebUI (a ticket redirect)",
        {"302": REDIRECT, "303": REDIRECT, "307": REDIRECT},
    ),
    # -- cluster (docs/cluster.md): the node protocol, and this node's site API for the master
    "node.models": _site("This node's configurations (the master's poll)"),
    "node.register": _site("A slave registers its snapshot", request=CONTROL_REQUEST),
    "node.runtime_status": _site("This node's load (active, queued, per lane and model)"),
    "node.state": _site("This node's state"),
    "node.offload_settings": _site("This node's offload settings"),
    "node.offload_settings_set": _site("Set this node's offload settings", request=CONTROL_REQUEST),
    "node.routing_links": _site("This node's routing links"),
    "node.routing_links_set": _site("Set this node's routing links", request=CONTROL_REQUEST),
    "node.rpc_leases": _site("This node's pooled-memory leases and what it could lend now"),
    "node.rpc_lease": _site("Lease memory on this node over RPC", request=CONTROL_REQUEST),
    "node.rpc_renew": _site("Renew a pooled-memory lease", request=CONTROL_REQUEST),
    "node.rpc_release": _site("End a pooled-memory lease", request=CONTROL_REQUEST),
    "node.rpc_reclaim": _site(
        "A lending node asks the master to unload what holds its lease", request=CONTROL_REQUEST
    ),
    "node.site": Entry(
        "The same-named site route, on this node (what the master relays)",
        _ok(_NODE_SITE),
        request=CONTROL_REQUEST,
    ),
    "node.inference": _fwd(
        "An inference request relayed to this node's backends", request=ANY_REQUEST
    ),
    # -- inference: forwarded, or translated and then forwarded
    "proxy": _fwd("Forwarded to the selected backend", request=JSON_REQUEST),
    "responses.create": _fwd("OpenAI Responses (translated where the backend lacks it)"),
    "responses.follow": _fwd("A stored response (the backend that made it)"),
    "anthropic.messages": _fwd("Anthropic Messages (translated where the backend lacks it)"),
    "ollama.tags": Entry("Local models (Ollama)", _ok(json_of(s.OllamaTags))),
    "ollama.ps": Entry("Running models (Ollama)", _ok(json_of(s.OllamaPs))),
    "ollama.version": Entry("Ollama compatibility version", _ok(json_of(s.OllamaVersion))),
    "ollama.show": Entry(
        "One model's details (Ollama)",
        _ok(json_of(s.OllamaShow)),
        request=json_schema(
            {
                "type": "object",
                "properties": {"model": {"type": "string"}, "name": {"type": "string"}},
            },
            "`model` (or `name`)",
        ),
    ),
    "ollama.root": Entry("Ollama's liveness probe: `Ollama is running`", _ok(TEXT)),
    "ollama.pull": Entry(
        "Pull a Hugging Face GGUF (`hf.co/{owner}/{repository}:{quantization}`), or a name "
        "the router already serves (success, nothing fetched): Ollama's progress records "
        "(NDJSON, or the last one as JSON with `stream: false`)",
        _ok(_PULL),
        request=json_schema(
            {
                "type": "object",
                "properties": {
                    "model": {"type": "string"},
                    "name": {"type": "string"},
                    "stream": {"type": "boolean"},
                },
            },
            "`model` (or `name`): hf.co/{owner}/{repository}[:{quantization}], or a served "
            "model's name",
        ),
    ),
    "ollama.manage": Entry(
        "Ollama's push, copy, create and delete: 400 with what to do instead", _ok(JSON_OBJECT)
    ),
    "ollama.chat": _fwd("Ollama chat (translated where the backend lacks it)"),
    "ollama.generate": _fwd("Ollama generate (translated where the backend lacks it)"),
    "ollama.embed": _fwd("Ollama embed (translated where the backend lacks it)"),
    "ollama.embeddings": _fwd("Ollama embeddings, legacy (translated)"),
    "voice.speech": _fwd("Text to speech and voice lists"),
    "voice.transcriptions": _fwd("Speech to text (multipart upload)", request=ANY_REQUEST),
    "voice.translations": _fwd("Speech to English text (multipart upload)", request=ANY_REQUEST),
    "voice.transcribe": _fwd("Kobold speech to text", request=ANY_REQUEST),
    "realtime.connect": _fwd("OpenAI Realtime (WebSocket)"),
    "images.forward": _fwd("Image generation (OpenAI, A1111, sd.cpp)", request=ANY_REQUEST),
    "sdapi.options": Entry(
        "A1111 options; POST `sd_model_checkpoint` switches the image model (loads it)",
        _ok(json_schema({"type": "object"}, "The options")),
        by_method={"POST": _ok(json_schema({"type": "null"}, "null, as A1111 answers"))},
        request=CONTROL_REQUEST,
    ),
    "sdapi.refresh": Entry("A1111 refresh checkpoints", _ok(JSON_ANY), request=CONTROL_REQUEST),
    "comfy.prompt": _fwd("ComfyUI prompt queue"),
    "comfy.history": _fwd(
        "ComfyUI history (the router's jobs, and a KoboldCpp's); POST clears or deletes",
        by_method={"GET": _ok(JSON_OBJECT), "POST": _ok(Answer("Empty, as ComfyUI answers"))},
    ),
    "comfy.view": _fwd("ComfyUI outputs"),
    "comfy.upload": _fwd("ComfyUI image upload (multipart)", request=ANY_REQUEST),
}
