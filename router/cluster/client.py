"""The node client: the only code that calls another router, and only at allowed base URLs.

Redirects are never followed: a node answers its routes directly, so a 3xx is an error (a
control call) or relayed as it is (a stream), and the token can never ride a redirect to a host
outside the allow-list. Two modes:

- buffered (`fetch`, and `call` for a JSON control call): one deadline for request and response
  together (`cluster.control_timeout` unless the caller names another); the whole answer is read,
  however many pieces the network cuts it into, up to a cap.
- streamed (`stream`): a connect deadline, then an idle deadline between the bytes (the answer's
  head included); the caller gets the open response and relays its body as it comes. A lost
  connection is `PeerUnreachable` (a BadGateway), told apart from a timeout or a bad answer.
- a websocket (`websocket`, the realtime relay), open as long as the session.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
from multidict import CIMultiDict, CIMultiDictProxy

from router.cluster.urls import AllowList
from router.edge import read_capped_stream
from router.errors import BadGateway, ClusterError, GatewayTimeout, RouterError

# A snapshot of 200 models is ~100 KB; this bounds what a broken or hostile peer can make us hold.
MAX_CONTROL_REPLY = 16 * 1024 * 1024
# The streamed mode's deadlines unless the caller names others (the site relay's since R34).
STREAM_CONNECT, STREAM_IDLE = 10.0, 600.0

Params = Mapping[str, str] | None


class PeerError(RouterError):
    """A peer answered with an error envelope; its status, type and code are kept."""

    def __init__(self, status: int, type_: str, code: str | None, message: str) -> None:
        super().__init__(message, code=code)
        self.status, self.type = status, type_


class PeerUnreachable(BadGateway):
    """The streamed mode lost the connection itself (refused, reset, closed mid-answer), as
    opposed to a malformed answer (a plain BadGateway) or a deadline (GatewayTimeout): a
    caller that tracks a node's health (the lending owner) tells them apart."""


@dataclass(frozen=True, slots=True)
class PeerReply:
    """A buffered answer: status, headers and the whole body."""

    status: int
    headers: CIMultiDictProxy[str]
    body: bytes


class PeerStream:
    """A streamed answer, open until the `async with` ends: status, headers, and `chunks()`
    as they come (each wait bounded by the idle deadline)."""

    def __init__(self, response: aiohttp.ClientResponse, label: str) -> None:
        self._response = response
        self._label = label
        self.status = response.status
        self.headers = response.headers

    async def chunks(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._response.content.iter_any():
                yield chunk
        except TimeoutError:
            raise GatewayTimeout(f"{self._label} stopped sending mid-answer") from None
        except aiohttp.ClientConnectionError as err:
            raise PeerUnreachable(f"{self._label} failed mid-answer: {err}") from None
        except aiohttp.ClientError as err:
            raise BadGateway(f"{self._label} failed mid-answer: {err}") from None

    async def __aenter__(self) -> PeerStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._response.release()


class NodeClient:
    def __init__(
        self, session: aiohttp.ClientSession, token: str, allowed: AllowList, timeout: float
    ) -> None:
        self._session = session
        self._token = token
        self.allowed = allowed
        self._timeout = timeout

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._token}"}

    def _request(
        self,
        method: str,
        target: str,
        data: bytes | None,
        headers: Mapping[str, str] | None,
        params: Params,
        timeout: aiohttp.ClientTimeout,
    ) -> Any:
        """The one place a peer is called: the token added, redirects never followed. A
        caller's repeated header (two `Accept` lines) is kept as it came."""
        merged = CIMultiDict(headers or {})
        merged.setdefault("Authorization", self.headers()["Authorization"])
        return self._session.request(
            method,
            target,
            params=params,
            data=data,
            headers=merged,
            timeout=timeout,
            allow_redirects=False,
        )

    def url(self, base: str, path: str) -> str:
        target = base.rstrip("/") + path
        if not self.allowed.allows(target):
            raise ClusterError(f"{base} is not a known cluster node", code="node_not_allowed")
        return target

    async def call(self, method: str, base: str, path: str, body: Any = None) -> dict[str, Any]:
        """A buffered control call; the peer's JSON object, or PeerError / BadGateway."""
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"} if data else {}
        reply = await self.fetch(method, base, path, data=data, headers=headers)
        return _decoded(base, path, reply.status, reply.body)

    async def fetch(
        self,
        method: str,
        base: str,
        path: str,
        *,
        data: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        params: Params = None,
        total: float | None = None,
        cap: int = MAX_CONTROL_REPLY,
        label: str | None = None,
    ) -> PeerReply:
        """The buffered mode: the whole answer within `total` seconds (default the control timeout),
        refused past `cap` bytes. The token is added to `headers`."""
        target, name = self.url(base, path), label or base
        deadline = aiohttp.ClientTimeout(total=self._timeout if total is None else total)
        try:
            async with self._request(method, target, data, headers, params, deadline) as reply:
                too_large = BadGateway(f"{name} answered {path} with more than {cap} bytes")
                # Every piece to the end (a 200-model snapshot arrives in several reads).
                raw = await read_capped_stream(reply.content, reply.content_length, cap, too_large)
                return PeerReply(reply.status, reply.headers, raw)
        except TimeoutError:
            raise GatewayTimeout(f"{name} did not answer {path} in time") from None
        except aiohttp.ClientError as err:
            raise BadGateway(f"{name} is unreachable: {err.__class__.__name__}") from None

    async def stream(
        self,
        method: str,
        base: str,
        path: str,
        *,
        data: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        params: Params = None,
        connect: float = STREAM_CONNECT,
        idle: float = STREAM_IDLE,
        label: str | None = None,
    ) -> PeerStream:
        """The streamed mode: the answer's head, then its body as it comes (`async with` the
        result). `connect` bounds the connection, `idle` every wait for bytes; no total."""
        target, name = self.url(base, path), label or base
        deadlines = aiohttp.ClientTimeout(total=None, sock_connect=connect, sock_read=idle)
        try:
            response = await self._request(method, target, data, headers, params, deadlines)
        except TimeoutError:
            raise GatewayTimeout(f"{name} did not answer in time") from None
        except aiohttp.ClientConnectionError as err:
            raise PeerUnreachable(f"{name} is unreachable: {err}") from None
        except aiohttp.ClientError as err:
            raise BadGateway(f"{name} is unreachable: {err}") from None
        return PeerStream(response, name)

    async def websocket(
        self,
        base: str,
        path: str,
        *,
        params: Params = None,
        headers: Mapping[str, str] | None = None,
        protocols: tuple[str, ...] = (),
        max_msg_size: int,
        close_timeout: float = 10.0,
    ) -> aiohttp.ClientWebSocketResponse:
        """A socket to the peer's `path` (the realtime relay): no receive deadline, the close
        one given. aiohttp's own errors propagate (the caller tells a refusal from a
        failure)."""
        return await self._session.ws_connect(
            self.url(base, path),
            params=params,
            headers=self.headers() | dict(headers or {}),
            protocols=protocols,
            max_msg_size=max_msg_size,
            autoclose=False,
            timeout=aiohttp.ClientWSTimeout(ws_receive=None, ws_close=close_timeout),
        )


def _decoded(base: str, path: str, status: int, raw: bytes) -> dict[str, Any]:
    if 300 <= status < 400:
        raise BadGateway(f"{base} redirected {path}; cluster calls never follow redirects")
    try:
        body = json.loads(raw) if raw.strip() else {}
    except ValueError:
        body = None
    if status >= 400:
        error = body.get("error") if isinstance(body, dict) else None
        if isinstance(error, dict):
            raise PeerError(
                status,
                str(error.get("type") or "upstream_error"),
                error.get("code") if isinstance(error.get("code"), str) else None,
                str(error.get("message") or f"{base} answered {status}"),
            )
        raise BadGateway(f"{base} answered {path} with {status}")
    if not isinstance(body, dict):
        raise BadGateway(f"{base} answered {path} with something other than a JSON object")
    return body
