"""The forwarding handler: select -> resolve -> lease -> forward -> record (DESIGN.md section 5)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass

from aiohttp import web
from multidict import CIMultiDict

from backends.registry import adapter_for
from router.api.inference import announce_wait, selectorless
from router.api.inference.guardian import answering
from router.api.inference.pins import pinned_target, pinning
from router.api.node import embeddings_target, relay, remote_target
from router.appkeys import CATALOG, PROXY, RECORDER, RUNTIMES, SETTINGS
from router.classify import Route
from router.cluster import Target, carries_images, has_vision
from router.cluster.placement import Guardian, Lend, Local, LocalFacts, Relay, RelayFacts, place
from router.config import PROGRAM_SECTIONS, ModelConfig, ProgramSection, Settings
from router.domain import BackendMode, Family, Lane, MiB, family_for
from router.edge import Handler, arrived, matched_route, queue_wait, upstream_request_headers
from router.errors import (
    BadGateway,
    BadRequest,
    ModelNotFound,
    PayloadTooLarge,
    RequestTimeout,
    RouteNotFound,
    RouterError,
)
from router.forwarding import (
    AbortDrain,
    ModelRewriter,
    ProxyResult,
    Rewrite,
    Selection,
    Translation,
    UpstreamRequest,
    body_stream,
    merge_chat_template_kwargs,
    read_selector,
)
from router.forwarding.embeddings import EmbeddingDimensions, dimensions_of
from router.lending import (
    BORROWED,
    LENDING,
    OFFLOAD_RETURNED,
    Link,
)
from router.records import RequestInfo
from router.runtime import Lease, Runtime, RuntimeView, choose_config


@dataclass(frozen=True)
class Override:
    """What a surface handler changed before forwarding (voice, images, Ollama): the body it
    already read or rewrote, and optionally another backend path or headers."""

    selection: Selection
    path_qs: str | None = None  # backend path and query; default: the request's own
    headers: Mapping[str, str] | None = None  # replaces the forwarded request headers
    # Called once a runtime is leased: may refuse (raise) or return a rewriter that also
    # watches the response (router/api/inference/responses.py remembers which runtime made a
    # response).
    on_lease: Callable[[Lease, ModelRewriter], ModelRewriter] | None = None
    # Called once a runtime is leased: how the backend's answer becomes the client's (Ollama
    # translates OpenAI answers); default: as it is, model IDs rewritten.
    translation: Callable[[Lease], Translation] | None = None
    # Answered by the router once a runtime is leased, nothing sent (Ollama's load request).
    answer: Callable[[Lease], web.StreamResponse] | None = None
    # Placement data (router/cluster/placement.py), never a decision: `follow` is the pin key
    # of a follow-up (a stored response, an sd-server job) whose id another node may have made;
    # `remember` the prefix under which the id a relayed answer starts with is pinned to the
    # node that made it. Either lets a request with `on_lease` be served elsewhere as sent.
    follow: str | None = None
    remember: str | None = None
    # How this node serves it, when it is placed here (Ollama translates only then: another
    # node gets the body as sent and translates it for its own backend).
    here: Callable[[], Override] | None = None
    # How long the runtime stays loaded after this request (Ollama's keep_alive; seconds,
    # math.inf = until unloaded); None leaves it as it is.
    keep_alive: float | None = None
    # Answered by the router for the chosen model without leasing (so never loading) a
    # runtime: Ollama's unload request.
    unleased: Callable[[ModelConfig, Lane], Awaitable[web.StreamResponse]] | None = None
    # The lane of the runtime the handler chose, when it is not the route's: an unnamed
    # Ollama embedding request passed to the default embedding backend (a text runtime).
    lane: Lane | None = None

    @property
    def plain(self) -> bool:
        """Forwarded as the client sent it (so another cluster node may serve it as sent)."""
        return (
            self.path_qs is None
            and self.headers is None
            and self.on_lease is None
            and self.translation is None
            and self.answer is None
            and self.unleased is None
        )

    @property
    def relayable(self) -> bool:
        """May be served by another node as the client sent it (`on_lease` only watches a
        local runtime; a handler that remembers relayed ids accepts a relay)."""
        return self.plain or (
            (self.follow is not None or self.remember is not None)
            and self.path_qs is None
            and self.headers is None
            and self.translation is None
            and self.answer is None
            and self.unleased is None
        )


# A handler that reads and checks the body itself passes this instead of an Override, so its
# refusals are recorded like every other request's.
Prepare = Callable[[], Awaitable[Override]]


async def forward(
    request: web.Request,
    override: Override | Selection | Prepare | None = None,
    *,
    facts: Facts | None = None,
) -> web.StreamResponse:
    """Forward one request; `override` when a handler already read (and kept) the body;
    `facts` when the handler gathered them first (`relay_facts`), to pick its own local flow."""
    route = matched_route(request)
    info = _info(request, route)
    async with recorded(request, info) as result:
        if isinstance(override, Selection):
            override = Override(override)
        elif callable(override):
            override = await override()
        return await _forward(request, route, info, result, override, facts)


async def forward_to(
    request: web.Request,
    runtime: Runtime | RuntimeView,
    path_qs: str,
    body: bytes | AsyncIterator[bytes] | None,
    info: RequestInfo,
    *,
    headers: Mapping[str, str] | None = None,
) -> web.StreamResponse:
    """Forward to one known runtime, no model selection and no lease (sd-server job polls,
    vLLM's operational routes, backend WebUIs under their caller's lease); recorded like
    every forwarded request. `headers` replaces the forwarded request headers."""
    family = runtime.family if isinstance(runtime, RuntimeView) else runtime.spec.family
    info.family = family.value
    async with recorded(request, info) as result:
        if isinstance(body, bytes):
            result.bytes_in = len(body)
        elif body is not None:
            body = _counted(body, *_stream_limits(request), result)
        upstream = UpstreamRequest(
            request.method,
            runtime.base_url + path_qs,
            _headers(request) if headers is None else headers,
            body,
            not isinstance(body, AsyncIterator),
        )
        return await request.app[PROXY].forward(
            request, upstream, IDENTITY, result, _overhead(info, result, 0.0)
        )


@contextlib.asynccontextmanager
async def recorded(request: web.Request, info: RequestInfo) -> AsyncIterator[ProxyResult]:
    """One analytics event for what happens inside, however it ends."""
    result = ProxyResult()
    returned = False
    try:
        yield result
    except asyncio.CancelledError:
        result.aborted, result.status = True, 499
        raise
    except RouterError as exc:
        result.status = result.status or exc.status
        result.error_message = result.error_message or exc.message
        # A lent request handed back to its owner is no request of this node's (lending.md).
        returned = exc.code == OFFLOAD_RETURNED
        raise
    finally:
        # A request another node answered is recorded there; one that reached none, here.
        if not returned and not (result.relayed and result.upstream_status is not None):
            _record(request, info, result)


def _record(request: web.Request, info: RequestInfo, result: ProxyResult) -> None:
    request.app[RECORDER].record(
        info,
        status=result.status or 500,
        upstream_status=result.upstream_status,
        error_message=result.error_message,
        ttfb_ms=result.ttfb_ms,
        bytes_in=result.bytes_in,
        bytes_out=result.bytes_out,
        aborted=result.aborted,
        tail=result.tail,
    )


def _info(request: web.Request, route: Route) -> RequestInfo:
    return RequestInfo(
        route.template, route.surface.value, _lane_name(route), arrived(request), time.time()
    )


IDENTITY = Rewrite(ModelRewriter("", ""))
CHAT_COMPLETIONS = "/v1/chat/completions"
EMBEDDINGS = "/v1/embeddings"


async def _forward(
    request: web.Request,
    route: Route,
    info: RequestInfo,
    result: ProxyResult,
    override: Override | None,
    facts: Facts | None = None,
) -> web.StreamResponse:
    if override is None:
        scan_limit = int(request.app[SETTINGS].limits.selector_scan_mb * MiB)
        idle = request.app[SETTINGS].server.header_timeout
        try:
            async with asyncio.timeout(idle):  # S2: a body that trickles in is refused
                override = Override(await read_selector(request, route, scan_limit))
        except TimeoutError:
            raise RequestTimeout(
                f"the request body did not arrive within {idle:g}s (server.header_timeout)"
            ) from None
    selection = override.selection
    lane = route.lane or Lane.TEXT
    lending = request.app[LENDING]
    if (
        facts is None
        and selection.model is None
        and lane is Lane.EMBEDDINGS
        and override.relayable
        and request.get(BORROWED) is None
    ):
        facts = await _embeddings_facts(request)
    facts = facts or relay_facts(request, override)
    local = None
    config, public_id = None, ""
    if not facts.relays:  # a relayed model need not be configured here
        if override.here is not None:
            override = override.here()
            selection = override.selection
        config, public_id, lane = _choose(request, route, selection, override.lane)
        info.model, info.lane = public_id, lane.value
        local = LocalFacts(
            (route.lane or Lane.TEXT) is Lane.TEXT and _needs_guardian(config, selection),
            lending.owner.lendable(request, selection, config, lane) if override.plain else (),
        )
    placement = place(facts, local)
    if isinstance(placement, Relay):
        return await _relay(request, selection, placement, result)
    assert config is not None
    if override.unleased is not None:
        response = await override.unleased(config, lane)
        result.status = response.status
        return response
    links: tuple[Link, ...] = ()
    if isinstance(placement, Guardian):
        config, target = answering(request, config, info)
        if target is not None:
            following = functools.partial(_chosen, request, selection)
            return await relay(request, selection, target, result, None, following)
        # The guardian answers here; its own lending links may still lend it.
        links = lending.owner.lendable(request, selection, config, lane) if override.plain else ()
    elif isinstance(placement, Lend):
        links = placement.links
    if links:
        held_from = time.monotonic()
        lent = await lending.owner.lend(request, selection, links, result)
        if lent is not None:
            return lent
        # Held time is waiting, not work: the cost fits read duration less queue wait.
        info.queue_wait_ms += (time.monotonic() - held_from) * 1000.0
    if lending.helper.ungated(request, config, lane):
        return await _serve(request, route, info, result, override, config, public_id, lane)
    with lending.owner.finishing(links):
        async with lending.helper.serving(request, config, lane):
            return await _serve(request, route, info, result, override, config, public_id, lane)


Facts = RelayFacts[Target, Link]


def relay_facts(request: web.Request, override: Override) -> Facts:
    """The data a relay is decided on: the pinned node of a follow-up, the cluster's chosen
    replica and the lending links that hold a relayed slave model. Borrowed work (lent to
    this node, the master's own included) is served here, never relayed."""
    selection, lane = override.selection, matched_route(request).lane or Lane.TEXT
    pinned = pinned_target(request, override.follow) if override.follow else None
    relayable = override.relayable and request.get(BORROWED) is None and pinned is None
    chosen = _chosen(request, selection) if relayable else None
    held: tuple[Link, ...] = ()
    if chosen is not None and override.plain:
        held = tuple(request.app[LENDING].owner.lendable_remote(request, selection, chosen, lane))
    return RelayFacts(pinned, chosen, relayable, held, override.remember)


async def _embeddings_facts(request: web.Request) -> Facts | None:
    """Selectorless embeddings on a master: another node's loaded runtime in the rotation
    (router/api/node/embeddings_relay.py); None when this node serves it."""
    target = await embeddings_target(request)
    return None if target is None else RelayFacts(chosen=target, relayable=True)


def relay_target(request: web.Request, override: Override) -> Target | None:
    """The node a request served outside `forward` goes to (a realtime WebSocket session is
    relayed whole), or None when this node serves it: the same placement."""
    facts = relay_facts(request, override)
    placement = place(facts, None) if facts.relays else Local()
    return placement.target if isinstance(placement, Relay) else None


def _chosen(request: web.Request, selection: Selection) -> Target | None:
    """The cluster registry's replica for the named model; None: this node's (the one place
    the registry is asked, for a request's placement and for a relay's next replica)."""
    return remote_target(request, selection)


async def _relay(
    request: web.Request,
    selection: Selection,
    placement: Relay[Target, Link],
    result: ProxyResult,
) -> web.StreamResponse:
    target = placement.target
    watch = pinning(request, target, placement.remember) if placement.remember else None
    following = functools.partial(_chosen, request, selection)
    to_owner = functools.partial(relay, request, selection, target, result, watch, following)
    if placement.held:  # a slave's linked model: held here until lent or relayed to its owner
        lending = request.app[LENDING]
        return await lending.owner.hold_then_relay(
            request, selection, placement.held, result, to_owner
        )
    return await to_owner()


async def _serve(
    request: web.Request,
    route: Route,
    info: RequestInfo,
    result: ProxyResult,
    override: Override,
    config: ModelConfig,
    public_id: str,
    lane: Lane,
) -> web.StreamResponse:
    """Serve on this node: lease a runtime of `config` and forward to it."""
    family = family_for(config.backend_mode, lane)
    info.family = family.value if family else None
    backend_path = _path(override.path_qs or request.path)
    _check_served(route, config, public_id, lane, request, backend_path)
    override = _with_dimensions(override, family, backend_path, public_id)
    for resend in (False, True):
        lease = await announce_wait.ensure(
            request, override.selection, config, lane, override.keep_alive
        )
        info.queue_wait_ms += lease.queue_wait_ms
        queue_wait.note(request, info.queue_wait_ms)
        try:
            return await _send(request, lease, override, config, public_id, info, result)
        except BadGateway:
            # (tests/real/test_router_llama.py) A backend killed just before this request was
            # leased to it, before the router saw the exit: the request then fails on a pooled
            # keep-alive connection ("Connection reset by peer"). If the process really exited,
            # relaunch it and send once more, as "the next request relaunches it" promises.
            if resend or not await _backend_died(request, lease, override, result):
                raise
        finally:
            lease.release()
    raise AssertionError("unreachable")


def _with_dimensions(
    override: Override, family: Family | None, path: str, public_id: str
) -> Override:
    """OpenAI `dimensions` on /v1/embeddings, for the backends that ignore it: the router cuts
    the vectors (router/forwarding/embeddings.py); vLLM does it itself."""
    selection = override.selection
    if (
        path != EMBEDDINGS
        or family not in (Family.LLAMACPP, Family.KOBOLD)
        or override.translation is not None
        or not selection.complete
        or b"dimensions" not in selection.prefix
    ):
        return override
    try:
        dims = dimensions_of(json.loads(selection.prefix))
    except (ValueError, RecursionError):
        return override  # not JSON: the backend answers it as it does
    if dims is None:
        return override

    def translation(lease: Lease) -> Translation:
        local = lease.runtime.local_model_id or public_id
        return EmbeddingDimensions(ModelRewriter(public_id, local), dims)

    return dataclasses.replace(override, translation=translation)


def _needs_guardian(config: ModelConfig, selection: Selection) -> bool:
    """Images sent to a model that cannot read them (a cheap byte scan first)."""
    return bool(selection.prefix) and not has_vision(config) and carries_images(selection.prefix)


DEATH_GRACE_S = 0.25  # the exit of a killed backend is seen within milliseconds


async def _backend_died(
    request: web.Request, lease: Lease, override: Override, result: ProxyResult
) -> bool:
    """True when the request failed before any answer because the backend process is gone.

    Only then is a resend safe: a live backend that reset the connection after reading the
    body keeps its 502 (R31), and a body the router does not hold cannot be resent anyway.
    """
    process = lease.runtime.process
    if result.upstream_status is not None or not override.selection.complete or process is None:
        return False
    try:
        code = await asyncio.wait_for(asyncio.shield(process.wait_exit()), DEATH_GRACE_S)
    except TimeoutError:
        return False
    request.app[RUNTIMES].report_failure(lease.runtime, f"the backend exited with code {code}")
    return True


async def _send(
    request: web.Request,
    lease: Lease,
    override: Override,
    config: ModelConfig,
    public_id: str,
    info: RequestInfo,
    result: ProxyResult,
) -> web.StreamResponse:
    if override.answer is not None:
        response = override.answer(lease)
        result.status = response.status
        return response
    runtime = lease.runtime
    path_qs = override.path_qs or request.rel_url.raw_path_qs
    also = _answered_paths(runtime, config, _path(path_qs))
    rewriter = ModelRewriter(public_id, runtime.local_model_id or public_id, also)
    if override.on_lease is not None:
        rewriter = override.on_lease(lease, rewriter)
    selection = override.selection
    # The config's template kwargs go with every chat completion the backend gets, whatever
    # surface the client spoke (an Ollama /api/chat becomes one).
    if config.jinja_kwargs and _path(path_qs) == CHAT_COMPLETIONS and selection.complete:
        merged = merge_chat_template_kwargs(
            selection.prefix, config.jinja_kwargs, config.jinja_precedence
        )
        selection = Selection(selection.model, merged, True, selection.source)
    body, replayable = _body(request, selection, rewriter, result)
    upstream = UpstreamRequest(
        request.method,
        runtime.base_url + path_qs,
        override.headers if override.headers is not None else _headers(request),
        body,
        replayable,
        _abort_drain(request.app[SETTINGS], runtime.spec.family),
    )
    translation = (
        override.translation(lease) if override.translation is not None else Rewrite(rewriter)
    )
    overhead_ms = _overhead(info, result, lease.queue_wait_ms / 1000.0)
    response = await request.app[PROXY].forward(request, upstream, translation, result, overhead_ms)
    if result.backend_failed:
        request.app[RUNTIMES].report_failure(runtime, result.error_message or "backend stalled")
    return response


_NATIVE_COMPLETION = frozenset({"/completion", "/completions"})


def _answered_paths(runtime: Runtime, config: ModelConfig, path: str) -> tuple[str, ...]:
    """llama-server's native /completion answer names the model by its file's absolute path
    (not its --alias): that path too becomes the public ID. Other answers never carry it, so
    their rewriting stays free."""
    if runtime.spec.family is not Family.LLAMACPP or path not in _NATIVE_COMPLETION:
        return ()
    model_file = config.model_file(runtime.spec.lane)
    return (str(model_file),) if model_file is not None else ()


def _overhead(info: RequestInfo, result: ProxyResult, wait_s: float) -> Callable[[], float]:
    def overhead_ms() -> float:
        # Everything since arrival except the wait for a runtime and the backend's own time.
        spent = time.monotonic() - info.started - wait_s - (result.ttfb_ms or 0.0) / 1000.0
        return max(0.0, spent * 1000.0)

    return overhead_ms


def _abort_drain(settings: Settings, family: Family) -> AbortDrain | None:
    """R23b: drain instead of cancel, for a program configured so."""
    program: ProgramSection = getattr(settings, PROGRAM_SECTIONS[family])
    if not program.drain_on_abort:
        return None
    return AbortDrain(program.abort_drain_bytes, program.abort_drain_timeout)


def _path(path_qs: str) -> str:
    return path_qs.split("?", 1)[0]


def _choose(
    request: web.Request, route: Route, selection: Selection, chosen: Lane | None = None
) -> tuple[ModelConfig, str, Lane]:
    catalog = request.app[CATALOG]
    lane = route.lane or Lane.TEXT
    if selection.model is None:
        if route.model_required:
            raise BadRequest(
                f'{route.template} needs a "model": one of {", ".join(catalog.text_ids()) or "(none configured)"}',
                param="model",
            )
        config, lane = _fallback(request, lane)
        return (
            config,
            (config.image_id if lane is Lane.IMAGE and config.image_id else config.id),
            lane,
        )
    found = catalog.resolve(selection.model)
    if found is None:
        raise ModelNotFound(selection.model)
    config = found
    if selection.model == config.image_id and lane is not Lane.IMAGE:
        raise BadRequest(
            f"{selection.model!r} is an image model; use /v1/images/generations or /sdapi/v1/txt2img"
        )
    return config, selection.model, chosen or lane


def _fallback(request: web.Request, lane: Lane) -> tuple[ModelConfig, Lane]:
    """No selector: the lane's active runtime, else the only config that serves it. An unnamed
    embeddings request never loads a model (too costly a guess): it goes to the default
    embedding backend or is refused (router/api/inference/selectorless.py)."""
    if lane is Lane.EMBEDDINGS:
        return selectorless.local_embeddings(request, request.path, request.method)
    configs = request.app[CATALOG].configs()
    views = request.app[RUNTIMES].views()
    return choose_config(None, lane, configs, views), lane


def _check_served(
    route: Route,
    config: ModelConfig,
    public_id: str,
    lane: Lane,
    request: web.Request,
    backend_path: str,
) -> None:
    # Messages name the ID the client used (an image model's own ID, an alias), never a file.
    if lane not in config.lanes:
        raise BadRequest(f"model {public_id!r} has no {lane} component; {_use_instead(config)}")
    if config.backend_mode is BackendMode.VLLM and not route.vllm:
        raise RouteNotFound(request.path)  # vLLM's strict allowlist (S23): never forwarded
    family = family_for(config.backend_mode, lane)
    if family is None:
        raise BadRequest(f"{lane} requests are not served under backend_mode {config.backend_mode}")
    if not adapter_for(family).serves(backend_path, request.method):
        raise BadRequest(
            f"{request.method} {request.path} is not served by {family} for model {public_id!r}; "
            f"{_use_instead(config)}"
        )


_ENDPOINT_FOR = {
    Lane.TEXT: "/v1/chat/completions",
    Lane.EMBEDDINGS: "/v1/embeddings",
    Lane.IMAGE: "/v1/images/generations",
    Lane.VOICE: "/v1/audio/transcriptions",
    Lane.MUSIC: "/api/extra/music/...",
}


def _use_instead(config: ModelConfig) -> str:
    uses = [_ENDPOINT_FOR[lane] for lane in Lane if lane in config.lanes]
    return "use " + " or ".join(uses) if uses else "it serves nothing"


def _body(
    request: web.Request,
    selection: Selection,
    rewriter: ModelRewriter,
    result: ProxyResult,
) -> tuple[bytes | AsyncIterator[bytes] | None, bool]:
    if selection.complete:
        body = rewriter.request_body(selection.prefix) if selection.prefix else b""
        result.bytes_in = len(body)
        return (body if body or request.can_read_body else None), True
    return _counted(body_stream(selection, request), *_stream_limits(request), result), False


def _stream_limits(request: web.Request) -> tuple[int, float]:
    """The cap on a streamed request body and how long it may stop arriving."""
    settings = request.app[SETTINGS]
    cap = int(settings.limits.max_stream_request_gb * 1024 * MiB)
    return cap, settings.server.header_timeout


async def _counted(
    chunks: AsyncIterator[bytes], cap: int, idle: float, result: ProxyResult
) -> AsyncIterator[bytes]:
    """The rest of a large body: counted against the cap, and cut when it stops arriving."""
    iterator = aiter(chunks)
    while True:
        try:
            async with asyncio.timeout(idle):
                chunk = await anext(iterator)
        except StopAsyncIteration:
            return
        except TimeoutError:
            raise RequestTimeout(f"the request body stalled for {idle:g}s") from None
        result.bytes_in += len(chunk)
        if result.bytes_in > cap:
            raise PayloadTooLarge(
                f"the body is larger than {cap} bytes (limits.max_stream_request_gb)"
            )
        yield chunk


def _headers(request: web.Request) -> CIMultiDict[str]:
    return upstream_request_headers(request.headers, extra_drop=("x-tensors-model",))


def _lane_name(route: Route) -> str | None:
    return route.lane.value if route.lane else None


HANDLERS: dict[str, Handler] = {"proxy": forward}
