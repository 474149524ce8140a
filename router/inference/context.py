"""What one request carries through the pipeline (`Context`), what the place step chose for a
request served on this node (`Chosen`), and the one face of every placement kind (`Kind`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from aiohttp import web

from router.classify import Route
from router.config import ModelConfig
from router.domain import Lane
from router.forwarding import ProxyResult, Selection
from router.inference.override import Override
from router.records import RequestInfo


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
