"""The JSON bodies the router writes itself, as pydantic models: the source of the description.

Only the answers the router synthesizes are modelled here (errors, model lists, the Ollama
metadata routes, explicit control, the WebUI session). A field a handler writes must be declared
with its real type; `extra="allow"` keeps a field added later from being a mismatch, while a
declared field that changes type or disappears is one (tests/openapi/ validates live answers).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, RootModel

from router.domain import Lane


class Shape(BaseModel):
    model_config = ConfigDict(extra="allow")


# ---- errors: one renderer, three shapes (router/errors.py error_body) -----------------------


class ErrorDetail(Shape):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class Error(Shape):
    """OpenAI's error envelope: every surface but Ollama and Kobold."""

    error: ErrorDetail


class OllamaError(Shape):
    error: str


class KoboldErrorDetail(Shape):
    msg: str
    type: str


class KoboldError(Shape):
    detail: KoboldErrorDetail


# ---- meta ---------------------------------------------------------------------------------


class Health(Shape):
    status: Literal["ok"]


# ---- OpenAI and A1111 model lists ---------------------------------------------------------


class OpenAIModel(Shape):
    id: str
    object: Literal["model"]
    created: int
    owned_by: str
    status: str  # the runtime state (router extension): unloaded, starting, ready, ...


class OpenAIModelList(Shape):
    object: Literal["list"]
    data: list[OpenAIModel]


class SdModel(Shape):
    title: str
    model_name: str
    hash: str | None
    sha256: str | None
    filename: str
    config: str | None


# ---- Ollama (router/api/ollama.py) ---------------------------------------------------------


class OllamaDetails(Shape):
    parent_model: str
    format: str
    family: str
    families: list[str] | None
    parameter_size: str
    quantization_level: str


class OllamaTag(Shape):
    name: str
    model: str
    modified_at: str
    size: int
    digest: str
    details: OllamaDetails


class OllamaTags(Shape):
    models: list[OllamaTag]


class OllamaRunning(Shape):
    name: str
    model: str
    size: int
    digest: str
    details: OllamaDetails
    expires_at: str
    size_vram: int


class OllamaPs(Shape):
    models: list[OllamaRunning]


class OllamaVersion(Shape):
    version: str
    router: str


class OllamaShow(Shape):
    modelfile: str
    parameters: str
    template: str
    details: OllamaDetails
    model_info: dict[str, Any]
    capabilities: list[str]
    modified_at: str


# ---- explicit control (router/api/control.py, models.py) ------------------------------------


class LoadRequest(Shape):
    model: str
    lane: str | None = None
    dry_run: bool = False


class Loaded(Shape):
    model: str
    status: str
    runtime: str


class PlanDevice(Shape):
    device: str
    budget: int
    used: int
    estimate: int
    source: Literal["estimate", "measured"]


class PlanVictim(Shape):
    model: str
    lane: str
    reason: str


class PlanLease(Shape):
    """A lease this node lends over RPC that the load would ask back from its master."""

    lease_id: str
    master_id: str
    model: str
    bytes: int


class LoadPlan(Shape):
    """The dry run (`"dry_run": true`): what a load would do; nothing is loaded."""

    model: str
    fits: bool
    devices: list[PlanDevice]
    evict: list[PlanVictim]
    wait: Literal["none", "drain"]
    reclaim: list[PlanLease] = []
    # A model with router_rpc_nodes or router_vllm_nodes on a master: what it would lease.
    pooled: dict[str, Any] | None = None


class LoadAnswer(RootModel[Loaded | LoadPlan]):
    """The loaded runtime, or with `"dry_run": true` the plan (docs/residency.md)."""


class UnloadRequest(Shape):
    # Default "all", except with `forget_conversations` alone: then nothing is unloaded.
    target: Lane | Literal["all"] | None = None
    # A configuration whose saved conversations (KV states and their digests) are erased,
    # after the unload if one was asked; its loaded runtimes stay (docs/swaps.md, "Erasing").
    forget_conversations: str | None = None


class Unloaded(Shape):
    target: str | None  # None: only a library was erased
    unloaded: list[str]
    forgotten: int | None = None  # saved conversation states erased, when asked


class ShuttingDown(Shape):
    status: Literal["shutting down"]


class RuntimeState(Shape):
    """One runtime (router/runtime/state.py `describe`)."""

    runtime: str
    model: str
    family: str
    lanes: list[Lane]
    state: str
    pid: int | None
    port: int | None
    in_flight: int
    draining: bool
    queued: dict[str, int]
    error: str | None
    ready_at: float | None
    since: float


class Status(Shape):
    runtimes: list[RuntimeState]
    queued: dict[Lane, int]
    remote_devices: list[dict[str, Any]] = []  # pooled memory borrowed from lending nodes


class RouterModel(Shape):
    id: str
    image_id: str | None
    capabilities: list[str]
    backend_mode: str | None
    source: str
    node_id: str | None
    config_file: str | None
    hashes: dict[str, str | None]
    status: str
    available: bool
    missing_files: list[str]
    disabled: bool
    benchmark: dict[str, Any] | None


class RouterModelList(Shape):
    object: Literal["list"]
    data: list[RouterModel]
    errors: dict[str, str]  # .kcpps file name -> why it is not served


class ModelsState(Shape):
    disabled: list[str]


class ModelsStateSet(Shape):
    node_id: str
    local_id: str
    enabled: bool


# ---- the admin WebUI's sign-in (router/api/ui.py) --------------------------------------------


class UiNode(Shape):
    node_id: str
    version: str
    bind: str
    profile: str


class UiSession(Shape):
    authenticated: bool
    login_required: bool
    profile: str
    csrf_token: str | None
    expires_at: float | None
    trace_url: str | None = None  # observability.trace_url: the WebUI's trace viewer
    node: UiNode


class UiLogin(Shape):
    key: str


# ---- requests the router's own handlers read (what is not listed is refused or ignored) -----

LaneName = Lane | Literal["all"]


class NodesUnload(Shape):
    node_id: str | None = None
    lane: LaneName | None = None
    model: str | None = None


class ModelsStateRequest(Shape):
    node_id: str | None = None
    local_id: str
    enabled: bool


class GuardianRef(Shape):
    node_id: str | None = None
    model_id: str


class GuardianAssignment(Shape):
    scope: Literal["cluster", "node", "model"]
    node_id: str | None = None
    model_id: str | None = None
    guardian: GuardianRef


class BackendRef(Shape):
    node_id: str | None = None
    backend_id: str


class LaunchOptionsSet(BackendRef):
    options: dict[str, Any]


class OffloadSettingsRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")  # the handler refuses any other field

    settings: dict[str, Any]


# ---- site answers: the top-level fields (items the WebUI reads are in docs/site.md) ----------


class BackendState(Shape):
    """One native backend's install state (router/setup)."""

    id: str
    display_name: str
    family: str
    lifecycle_state: str
    installed: bool
    runtime_version: str | None
    recipe_version: str | None
    retryable: bool
    error: str | None


class BackendsInit(Shape):
    node_id: str
    backends: list[BackendState]


class NodesState(Shape):
    node_id: str
    role: str
    runtimes: list[dict[str, Any]]
    backends: list[BackendState]
    active_requests: int
    queued_requests: int


class LoadErrors(Shape):
    nodes: list[str]
    errors: list[dict[str, Any]]


class LoadCaptures(Shape):
    enabled: bool
    nodes: list[str]
    captures: list[dict[str, Any]]
    next_cursor: str | None


class OffloadDecisions(Shape):
    decisions: list[dict[str, Any]]
    next_before: Any
