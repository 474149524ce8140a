"""`GET /v1/realtime`: vLLM's realtime transcription WebSocket, relayed frame by frame.

The model comes from `?model=` or `X-Tensors-Model` (else the running vLLM voice runtime, else
the only vLLM config with a voice model). The backend socket is opened before the client's
upgrade is answered, so every failure before that (unknown model, load error, backend refusal)
is an ordinary HTTP error instead of a 101 followed by a close. A runtime lease is held for the
whole connection: idle unload cannot fire and a swap waits while a session is open (R13).

Frames are relayed as they come, text as text and binary as binary; a close code from one side
is passed to the other (codes that may not be sent on the wire become 1011). A frame larger
than `limits.max_control_body_mb` is refused by aiohttp's reader before it is buffered: the
sender gets 1009 (R25). Writes wait for the peer to drain, so a client that stops reading
stalls the backend side instead of growing the router's memory. Origin is checked by the edge
(S16) before this handler runs.

At shutdown every open session is closed with 1001 (going away) on both sides, before the drain
waits for leases (R28): a session has no end of its own the drain could wait for, and an idle
one would otherwise hold the router for the whole `runtime.drain_timeout`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass

import aiohttp
from aiohttp import WSMsgType, web

from router.appkeys import BACKENDS, CATALOG, CLUSTER, RECORDER, RUNTIMES, SESSIONS, SETTINGS
from router.backend_client import BackendFault
from router.cluster import Target
from router.config import ModelConfig
from router.domain import BackendMode, Family, Lane, MiB
from router.edge import (
    Handler,
    arrived,
    caller_of,
    matched_route,
    queue_wait,
    upstream_request_headers,
)
from router.errors import BadGateway, BadRequest, ModelNotFound, RouterError
from router.forwarding import read_selector
from router.forwarding.selector import SELECTOR_HEADER as SELECTOR
from router.inference import admit, relay_target
from router.records import RequestInfo
from router.runtime import Lease, choose_config

log = logging.getLogger(__name__)
HEARTBEAT_S = 30.0  # a client that vanished without a FIN must not hold the lease forever
UNSENDABLE = frozenset({1005, 1006, 1015})  # reserved: only reported locally, never sent
_WS_HEADERS = (
    "x-tensors-model",
    "origin",
    "sec-websocket-key",
    "sec-websocket-version",
    "sec-websocket-extensions",
    "sec-websocket-protocol",
)
AnyWS = web.WebSocketResponse | aiohttp.ClientWebSocketResponse
GOING_AWAY = 1001


@dataclass
class Outcome:
    """How one direction ended: the close code to pass on, and who ended it."""

    code: int = 1000
    reason: bytes = b""
    peer_closed: bool = False  # the source sent a close frame (its handshake is ours to finish)
    sink_failed: bool = False  # writing to the other side failed: that side is gone


async def connect(request: web.Request) -> web.StreamResponse:
    if not web.WebSocketResponse().can_prepare(request).ok:
        raise BadRequest("/v1/realtime is a WebSocket: connect with an Upgrade: websocket request")
    route = matched_route(request)
    selection = await read_selector(request, route, 0)
    admit(request, selection.model)  # a scoped key's model list and quota (403 / 429)
    target = relay_target(request, selection)
    if target is not None:  # another cluster node serves it; that node records the session
        return await _remote_session(request, target)
    config = _choose(request, selection.model)
    info = RequestInfo(
        route.template, route.surface.value, Lane.VOICE.value, arrived(request), time.time()
    )
    info.model, info.family = config.id, Family.VLLM.value
    status, error, traffic = 500, None, [0, 0]
    try:
        # Queued as its key's caller: its class, fairness name and cap (policy.decide).
        lease = await request.app[RUNTIMES].ensure(config, Lane.VOICE, caller=caller_of(request))
        info.queue_wait_ms = lease.queue_wait_ms
        queue_wait.note(request, lease.queue_wait_ms)  # on the 101 answer's headers
        try:
            status = 101
            return await _session(request, lease, traffic)
        finally:
            lease.release()
    except RouterError as exc:
        status, error = exc.status, exc.message
        raise
    finally:
        request.app[RECORDER].record(
            info, status=status, error_message=error, bytes_in=traffic[0], bytes_out=traffic[1]
        )


def _choose(request: web.Request, model: str | None) -> ModelConfig:
    """The vLLM voice config the session is for; 400/404 before any backend is touched."""
    catalog = request.app[CATALOG]
    if model is not None:
        config = catalog.resolve(model)
        if config is None:
            raise ModelNotFound(model)
        if not _serves_realtime(config):
            raise BadRequest(
                f"model {config.id!r} does not serve /v1/realtime: that needs backend_mode vllm "
                "and a transcription model (whispermodel)",
                param="model",
            )
        return config
    return choose_config(
        None,
        Lane.VOICE,
        catalog.configs(),
        request.app[RUNTIMES].views(),
        serves=_serves_realtime,
        what="realtime",
    )


def _serves_realtime(config: ModelConfig) -> bool:
    return config.backend_mode is BackendMode.VLLM and Lane.VOICE in config.lanes


async def _session(request: web.Request, lease: Lease, traffic: list[int]) -> web.WebSocketResponse:
    """Open the backend socket, accept the client, relay until either side ends."""
    cap = int(request.app[SETTINGS].limits.max_control_body_mb * MiB)
    backend = await _open_backend(request, lease, cap)
    return await _relayed(request, backend, cap, traffic)


async def _remote_session(request: web.Request, target: Target) -> web.WebSocketResponse:
    """The whole socket relayed to the node that holds the model (its lease lasts as long)."""
    cap = int(request.app[SETTINGS].limits.max_control_body_mb * MiB)
    service = request.app[CLUSTER]
    assert target.node_url is not None
    query = dict(request.rel_url.query)
    query.pop("model", None)
    offered = request.headers.get("Sec-WebSocket-Protocol", "")
    try:
        node = await service.client.websocket(
            target.node_url,
            "/router/v1/node/inference/v1/realtime",
            params=query,
            headers={SELECTOR: target.replica.local_id},
            max_msg_size=cap,
            protocols=tuple(p.strip() for p in offered.split(",") if p.strip()),
        )
    except aiohttp.WSServerHandshakeError as exc:
        refused = f"node {target.replica.node_id!r} refused the realtime session ({exc.status})"
        if 400 <= exc.status < 500:
            raise BadRequest(refused) from exc
        raise BadGateway(refused) from exc
    except (aiohttp.ClientError, OSError) as exc:
        service.node_failed(target.node_url, f"realtime: {exc}")
        raise BadGateway(f"cannot reach node {target.replica.node_id!r}: {exc}") from exc
    return await _relayed(request, node, cap, [0, 0])


async def _relayed(
    request: web.Request, upstream: aiohttp.ClientWebSocketResponse, cap: int, traffic: list[int]
) -> web.WebSocketResponse:
    """Accept the client with the subprotocol `upstream` chose, relay until either side ends."""
    try:
        client = web.WebSocketResponse(
            protocols=(upstream.protocol,) if upstream.protocol else (),
            max_msg_size=cap,
            heartbeat=HEARTBEAT_S,
            autoclose=False,
        )
        with request.app[SESSIONS].opened() as stop:
            await client.prepare(request)
            await relay(client, upstream, traffic, stop)
        return client
    finally:
        # Reached without a close from relay() when the client's connection dropped (aiohttp
        # cancels the handler), e.g. after refusing its oversized frame: "going away".
        with contextlib.suppress(Exception):
            await upstream.close(code=1001)


async def _open_backend(
    request: web.Request, lease: Lease, cap: int
) -> aiohttp.ClientWebSocketResponse:
    query = request.rel_url.raw_query_string
    url = lease.base_url + "/v1/realtime" + (f"?{query}" if query else "")
    offered = request.headers.get("Sec-WebSocket-Protocol", "")
    try:
        return await request.app[BACKENDS].ws_connect(
            url,
            protocols=[p.strip() for p in offered.split(",") if p.strip()],
            headers=upstream_request_headers(request.headers, extra_drop=_WS_HEADERS),
            max_msg_size=cap,
            autoclose=False,
            timeout=aiohttp.ClientWSTimeout(ws_receive=None, ws_close=10.0),
        )
    except BackendFault as exc:
        status = exc.backend_status
        if status is None:
            raise BadGateway(f"cannot open the backend's realtime socket: {exc.message}") from exc
        if 400 <= status < 500:
            raise BadRequest(
                f"the backend refused the realtime session ({status}): does this model "
                "support realtime transcription?"
            ) from exc
        raise BadGateway(f"the backend refused the realtime session ({status})") from exc


async def relay(
    client: web.WebSocketResponse,
    backend: aiohttp.ClientWebSocketResponse,
    traffic: list[int],
    stop: asyncio.Event,
) -> None:
    """Both directions until one ends (or `stop` is set); its close code goes to the other side.

    `traffic` counts payload bytes [client -> backend, backend -> client].
    """
    up = asyncio.ensure_future(pipe(client, backend, traffic, 0))
    down = asyncio.ensure_future(pipe(backend, client, traffic, 1))
    stopped = asyncio.ensure_future(stop.wait())
    try:
        done, _ = await asyncio.wait({up, down, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (up, down, stopped):
            task.cancel()
        await asyncio.gather(up, down, stopped, return_exceptions=True)
    if stopped in done and not (up in done or down in done):
        await _going_away(client, backend)
        return
    first = up if up in done else down
    failed = first.cancelled() or first.exception() is not None
    ended = Outcome(code=1011, sink_failed=True) if failed else first.result()
    if first is up:
        await _finish(client, backend, ended, source_is_client=True)
    else:
        await _finish(backend, client, ended, source_is_client=False)


async def _going_away(client: web.WebSocketResponse, backend: AnyWS) -> None:
    for side in (client, backend):
        with contextlib.suppress(Exception):
            await side.close(code=GOING_AWAY, message=b"the router is shutting down")


async def _finish(source: AnyWS, sink: AnyWS, ended: Outcome, *, source_is_client: bool) -> None:
    """Pass the close on: the sink gets the source's code, then the source's handshake ends."""
    if ended.sink_failed:
        # The sink vanished: tell the source why (the backend went away -> 1011 to the client).
        with contextlib.suppress(Exception):
            await source.close(code=1011 if source_is_client else 1001)
        return
    code = 1011 if ended.code in UNSENDABLE else ended.code
    if ended.code == 1009:
        # aiohttp already sent 1009 to whoever sent the oversized frame; the other side gets
        # "going away" (client's fault) or "internal error" (the backend sent too much).
        code = 1001 if source_is_client else 1011
    with contextlib.suppress(Exception):
        await sink.close(code=code, message=ended.reason[:120])
    if ended.peer_closed:
        with contextlib.suppress(Exception):
            await source.close(code=1000 if ended.code in UNSENDABLE else ended.code)


async def pipe(source: AnyWS, sink: AnyWS, traffic: list[int], slot: int) -> Outcome:
    """Relay one direction; returns how it ended."""
    while True:
        msg = await source.receive()
        if msg.type in (WSMsgType.TEXT, WSMsgType.BINARY):
            traffic[slot] += len(msg.data)
            try:
                if msg.type is WSMsgType.TEXT:
                    await sink.send_str(msg.data)
                else:
                    await sink.send_bytes(msg.data)
            except (ConnectionError, RuntimeError, aiohttp.ClientError):
                return Outcome(code=1006, sink_failed=True)
        elif msg.type is WSMsgType.CLOSE:
            return Outcome(int(msg.data), (msg.extra or "").encode()[:120], peer_closed=True)
        else:  # ERROR (aiohttp already closed the source, e.g. with 1009), CLOSING, CLOSED
            return Outcome(code=source.close_code or 1006)


HANDLERS: dict[str, Handler] = {"realtime.connect": connect}
