"""The router's own calls to its backends (docs/architecture.md, "Talking to backends").

Client traffic goes through `Proxy` (router/forwarding); everything else the router asks a
backend itself goes through one `BackendClient`: readiness and identity while a load waits, KV
slot save and restore, vLLM sleep and wake, benchmark probes, ComfyUI and A1111 side calls, the
realtime socket. The client owns the per-call deadline, turns every transport fault, non-2xx
answer a caller asked to refuse and unreadable JSON into one `BackendFault`, and runs the
router's bounded housekeeping calls (`bounded`): cut at a deadline, published as an
`{action, result, ms}` event, and never raising on a backend's fault.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from backends.base import Backend
from router.config import ModelConfig
from router.domain import Lane
from router.errors import BadGateway
from router.records import EventBus

log = logging.getLogger(__name__)

# A deadline of `UNBOUNDED` lifts the session's default total (5 minutes) for one call: a
# benchmark or a video job is bounded by its own caller, not by the session.
UNBOUNDED = math.inf
_EXCERPT = 200

# What a bounded call's work answers: the event's `result` and its extra fields.
Outcome = tuple[str, dict[str, Any]]


class BackendFault(BadGateway):
    """A backend did not answer as asked: unreachable, cut off, a refused status, or a body
    that is not the JSON expected. A 502 if it ever reaches the edge unhandled."""

    def __init__(self, message: str, backend_status: int | None = None) -> None:
        super().__init__(message)
        # The backend's own HTTP status, when it answered at all (`status` is the router's).
        self.backend_status = backend_status


@dataclass(frozen=True)
class Reply:
    """A whole answer of any status: what the callers that pass answers on need."""

    status: int
    body: bytes
    content_type: str

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def json(self) -> Any:
        try:
            return json.loads(self.body)
        except ValueError:
            raise BackendFault(f"the backend's answer is not JSON: {self.excerpt()}") from None

    def excerpt(self) -> str:
        return self.body[:_EXCERPT].decode("utf-8", "replace")


class BackendClient:
    """One shared client over the app's session; `events` receives the bounded calls' events."""

    def __init__(self, session: aiohttp.ClientSession, events: EventBus | None = None) -> None:
        self._session = session
        self._events = events

    # ---- plain calls --------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def stream(
        self, method: str, url: str, *, deadline: float | None = None, **send: Any
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        """The open response, for a caller that reads it as it arrives (any status)."""
        options: dict[str, Any] = {**send, **_timeout(deadline)}
        try:
            async with self._session.request(method, url, **options) as resp:
                yield resp
        except (aiohttp.ClientError, OSError) as exc:
            raise _fault(exc) from exc

    async def fetch(
        self, method: str, url: str, *, deadline: float | None = None, **send: Any
    ) -> Reply:
        """The whole answer, whatever its status; a transport fault is a `BackendFault`."""
        async with self.stream(method, url, deadline=deadline, **send) as resp:
            try:
                body = await resp.read()
            except (aiohttp.ClientError, OSError) as exc:
                raise _fault(exc) from exc
            return Reply(resp.status, body, resp.headers.get("Content-Type", ""))

    async def expect(
        self,
        method: str,
        url: str,
        body: Mapping[str, Any] | None = None,
        *,
        deadline: float | None = None,
    ) -> Reply:
        """An exchange that must answer 200 (its body may be empty), else a `BackendFault`."""
        reply = await self.fetch(method, url, json=body, deadline=deadline)
        if reply.status != 200:
            parts = urlsplit(url)
            route = parts.path + (f"?{parts.query}" if parts.query else "")
            raise BackendFault(
                f"{method} {route} answered {reply.status}: {reply.excerpt()}", reply.status
            )
        return reply

    async def call(
        self,
        method: str,
        url: str,
        body: Mapping[str, Any] | None = None,
        *,
        deadline: float | None = None,
    ) -> Any:
        """A JSON exchange that must answer 200: the parsed answer, else a `BackendFault`."""
        return (await self.expect(method, url, body, deadline=deadline)).json()

    async def ws_connect(self, url: str, **options: Any) -> aiohttp.ClientWebSocketResponse:
        """The backend's websocket; a refused handshake carries the backend's status."""
        try:
            socket: aiohttp.ClientWebSocketResponse = await self._session.ws_connect(url, **options)
            return socket
        except aiohttp.WSServerHandshakeError as exc:
            raise BackendFault(
                f"the backend refused the socket ({exc.status})", exc.status
            ) from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise _fault(exc) from exc

    # ---- readiness and identity (the adapter knows the route, the client the session) ----

    async def ready(self, adapter: Backend, base_url: str) -> bool:
        """The adapter's readiness probe; a transport fault is 'not yet'."""
        try:
            return await adapter.is_ready(self._session, base_url)
        except (aiohttp.ClientError, OSError, TimeoutError):
            return False

    async def verify(
        self, adapter: Backend, base_url: str, config: ModelConfig, lane: Lane
    ) -> None:
        """The adapter's identity check (raises `IdentityMismatch` for a stranger)."""
        await adapter.verify(self._session, base_url, config, lane)

    # ---- bounded housekeeping -----------------------------------------------------------

    async def bounded(
        self,
        event: str,
        identity: Mapping[str, Any],
        action: str,
        work: Callable[[], Awaitable[Outcome]],
        deadline: float,
        *,
        timeout_result: str = "timeout",
    ) -> Outcome | None:
        """Run `work` within `deadline` and publish `event` with `action`, `result`, `ms` and
        the work's fields. A fault is logged and published (`failed` with a `reason`, or
        `timeout_result`) and answers None: a save, restore or sleep never fails a load or a
        stop. A bug in `work` is logged with its trace and treated the same."""
        started = time.monotonic()
        name = identity.get("runtime") or identity.get("model_id") or "backend"
        try:
            outcome = await asyncio.wait_for(work(), deadline)
        except TimeoutError:
            log.warning("%s: %s %s took longer than %gs", name, event, action, deadline)
            reason = f"no answer within {deadline:g}s"
            self._publish(event, identity, action, timeout_result, started, reason=reason)
            return None
        except (BackendFault, aiohttp.ClientError, OSError, ValueError) as exc:
            log.warning("%s: %s %s failed: %s", name, event, action, exc)
            reason = str(exc)[:_EXCERPT] or type(exc).__name__
            self._publish(event, identity, action, "failed", started, reason=reason)
            return None
        except Exception as exc:  # a bug must not break the load or the stop either
            log.exception("%s: %s %s crashed", name, event, action)
            self._publish(event, identity, action, "failed", started, reason=type(exc).__name__)
            return None
        self._publish(event, identity, action, outcome[0], started, **outcome[1])
        return outcome

    def _publish(
        self,
        event: str,
        identity: Mapping[str, Any],
        action: str,
        result: str,
        started: float,
        **fields: Any,
    ) -> None:
        if self._events is None:
            return
        ms = round((time.monotonic() - started) * 1000.0, 1)
        self._events.publish(event, **identity, action=action, result=result, ms=ms, **fields)


@contextlib.asynccontextmanager
async def fresh_connections_client(
    events: EventBus | None = None,
) -> AsyncIterator[BackendClient]:
    """A client over a session of its own that opens a new connection per request and keeps
    none alive (for a caller that must not meet a connection the backend closed meanwhile)."""
    connector = aiohttp.TCPConnector(force_close=True, limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        yield BackendClient(session, events)


def _timeout(seconds: float | None) -> dict[str, Any]:
    if seconds is None:
        return {}  # the session's own
    return {"timeout": aiohttp.ClientTimeout(total=None if math.isinf(seconds) else seconds)}


def _fault(exc: BaseException) -> BackendFault:
    if isinstance(exc, TimeoutError):
        return BackendFault("the backend did not answer in time")
    return BackendFault(f"the backend connection failed: {type(exc).__name__}")
