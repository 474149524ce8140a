"""Serving a forwarded request on this node: lease a runtime of the chosen model, send the
request to it (model IDs rewritten, the config's chat template kwargs merged, embedding
`dimensions` cut by the router where the backend ignores them), and send once more when the
backend had died just before."""

from __future__ import annotations

import dataclasses
import json

from aiohttp import web
from multidict import CIMultiDict

from router.appkeys import RUNTIMES, SETTINGS
from router.config import ModelConfig
from router.domain import Family, family_for
from router.edge import queue_wait
from router.errors import BadGateway
from router.forwarding import (
    ModelRewriter,
    ProxyResult,
    Rewrite,
    Selection,
    Translation,
    UpstreamRequest,
    merge_chat_template_kwargs,
)
from router.forwarding.embeddings import EmbeddingDimensions, dimensions_of
from router.inference import announce_wait, outgoing, traced
from router.inference.choice import check_served
from router.inference.context import Chosen, Context
from router.inference.override import Override
from router.records import RequestInfo
from router.runtime import Lease, Runtime

CHAT_COMPLETIONS = "/v1/chat/completions"
EMBEDDINGS = "/v1/embeddings"


async def serve(ctx: Context, chosen: Chosen) -> web.StreamResponse:
    """Serve on this node: lease a runtime of the chosen config and forward to it."""
    request, route, info, result = ctx.http, ctx.route, ctx.info, ctx.result
    override, config, public_id, lane = ctx.override, chosen.config, chosen.public_id, chosen.lane
    family = family_for(config.backend_mode, lane)
    info.family = family.value if family else None
    backend_path = _path(override.upstream.path_qs or request.path)
    check_served(route, config, public_id, lane, request, backend_path)
    override = _with_dimensions(override, family, backend_path, public_id)
    for resend in (False, True):
        lease = await announce_wait.ensure(
            request, override.selection, config, lane, override.serving.keep_alive
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
        or override.on_lease.translation is not None
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

    on_lease = dataclasses.replace(override.on_lease, translation=translation)
    return dataclasses.replace(override, on_lease=on_lease)


async def _backend_died(
    request: web.Request, lease: Lease, override: Override, result: ProxyResult
) -> bool:
    """True when the request failed before any answer because the backend process is gone.

    Only then is a resend safe: a live backend that reset the connection after reading the
    body keeps its 502 (R31), and a body the router does not hold cannot be resent anyway.
    """
    if result.upstream_status is not None or not override.selection.complete:
        return False
    return await request.app[RUNTIMES].confirm_death(lease.runtime)


async def _send(
    request: web.Request,
    lease: Lease,
    override: Override,
    config: ModelConfig,
    public_id: str,
    info: RequestInfo,
    result: ProxyResult,
) -> web.StreamResponse:
    """One attempt on the leased runtime: the router's own answer, or the request sent."""
    hooks, headers = override.on_lease, override.upstream.headers
    if hooks.answer is not None:
        response = hooks.answer(lease)
        result.status = response.status
        return response
    runtime = lease.runtime
    path_qs = override.upstream.path_qs or request.rel_url.raw_path_qs
    also = _answered_paths(runtime, config, _path(path_qs))
    rewriter = ModelRewriter(public_id, runtime.local_model_id or public_id, also)
    if hooks.rewriter is not None:
        rewriter = hooks.rewriter(lease, rewriter)
    selection = override.selection
    # The config's template kwargs go with every chat completion the backend gets, whatever
    # surface the client spoke (an Ollama /api/chat becomes one).
    if config.jinja_kwargs and _path(path_qs) == CHAT_COMPLETIONS and selection.complete:
        merged = merge_chat_template_kwargs(
            selection.prefix, config.jinja_kwargs, config.jinja_precedence
        )
        selection = Selection(selection.model, merged, True, selection.source)
    body, replayable = outgoing.body(request, selection, rewriter, result)
    sent = outgoing.headers(request) if headers is None else CIMultiDict(headers)
    url, family = runtime.base_url + path_qs, runtime.spec.family
    translation = hooks.translation(lease) if hooks.translation is not None else Rewrite(rewriter)
    overhead_ms = outgoing.overhead(info, result, lease.queue_wait_ms / 1000.0)
    drain = outgoing.abort_drain(request.app[SETTINGS], family)
    upstream = UpstreamRequest(request.method, url, sent, body, replayable, drain)
    response = await traced.called(
        request, upstream, translation, result, overhead_ms, public_id, family.value
    )
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


def _path(path_qs: str) -> str:
    return path_qs.split("?", 1)[0]
