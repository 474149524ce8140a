"""What one request carries through the pipeline (`Context`), what the place step chose for a
request served on this node (`Chosen`), and the one face of every placement kind (`Kind`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from aiohttp import web

from router.classify import Route
from router.cluster import Asked
from router.config import ModelConfig
from router.domain import Lane
from router.forwarding import ProxyResult, Selection
from router.inference.override import Override
from router.lending import Lent
from router.records import RequestInfo

# Set by the node inference route on a request lent to this node: the owner's marks (whether
# the link allows a load, a restore afterwards, whose work it is). Absent: a client's own.
LENT: web.RequestKey[Lent] = web.RequestKey("lent", Lent)


def lent_of(request: web.Request) -> Lent | None:
    return request.get(LENT)


@dataclass(frozen=True)
class Context:
    """One forwarded request: the client's request and route, what the handler made of it
    (`override`), its analytics row (`info`, filled as it goes) and the proxy's result."""

    http: web.Request
    route: Route
    info: RequestInfo
    result: ProxyResult
    override: Override

    @property
    def selection(self) -> Selection:
        return self.override.selection

    @property
    def lent(self) -> Lent | None:
        """The owner's marks when this request was lent to this node (served here, never
        lent on or relayed); None for a client's own request."""
        return lent_of(self.http)

    @property
    def asked(self) -> Asked:
        """What lending and a relay read of the client's request (method, URL, headers)."""
        return Asked.of(self.http)


@dataclass(frozen=True)
class Chosen:
    """The configuration that serves a request here, the ID the client named it by (answers
    carry it) and the lane of the runtime to lease."""

    config: ModelConfig
    public_id: str
    lane: Lane


class Kind(Protocol):
    """A placement kind (router/inference/kinds.py): how a request placed one way is served."""

    async def serve(self, ctx: Context) -> web.StreamResponse: ...
