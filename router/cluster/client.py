"""The node client: the only code that calls another router, and only at allowed base URLs.

Redirects are never followed: a node answers its routes directly, so a 3xx is an error, and the
token can never ride a redirect to a host outside the allow-list. Every call has one deadline
(`cluster.control_timeout`) for request and response together.
"""

from __future__ import annotations

import json
from typing import Any

import aiohttp

from router.cluster.urls import AllowList
from router.edge import read_capped_stream
from router.errors import BadGateway, ClusterError, GatewayTimeout, RouterError

# A snapshot of 200 models is ~100 KB; this bounds what a broken or hostile peer can make us hold.
MAX_CONTROL_REPLY = 16 * 1024 * 1024


class PeerError(RouterError):
    """A peer answered with an error envelope; its status, type and code are kept."""

    def __init__(self, status: int, type_: str, code: str | None, message: str) -> None:
        super().__init__(message, code=code)
        self.status, self.type = status, type_


class NodeClient:
    def __init__(
        self, session: aiohttp.ClientSession, token: str, allowed: AllowList, timeout: float
    ) -> None:
        self._session = session
        self._token = token
        self.allowed = allowed
        self._timeout = aiohttp.ClientTimeout(total=timeout)

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._token}"}

    def url(self, base: str, path: str) -> str:
        target = base.rstrip("/") + path
        if not self.allowed.allows(target):
            raise ClusterError(f"{base} is not a known cluster node", code="node_not_allowed")
        return target

    async def call(self, method: str, base: str, path: str, body: Any = None) -> dict[str, Any]:
        """A buffered control call; the peer's JSON object, or PeerError / BadGateway."""
        target = self.url(base, path)
        data = None if body is None else json.dumps(body).encode()
        headers = self.headers() | ({"Content-Type": "application/json"} if data else {})
        try:
            async with self._session.request(
                method, target, data=data, headers=headers, timeout=self._timeout,
                allow_redirects=False,
            ) as reply:  # fmt: skip
                # Every piece to the end (a 200-model snapshot arrives in several reads).
                too_large = BadGateway(
                    f"{base} answered {path} with more than {MAX_CONTROL_REPLY} bytes"
                )
                raw = await read_capped_stream(
                    reply.content, reply.content_length, MAX_CONTROL_REPLY, too_large
                )
                status = reply.status
        except TimeoutError:
            raise GatewayTimeout(f"{base} did not answer {path} in time") from None
        except aiohttp.ClientError as err:
            raise BadGateway(f"{base} is unreachable: {err.__class__.__name__}") from None
        return _decoded(base, path, status, raw)


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
