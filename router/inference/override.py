"""What a surface handler hands `forward` (router/api/inference/forward.py) when it read, checked
or rewrote the request itself: an `Override`, or a `Prepare` that makes one."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from aiohttp import web

from router.config import ModelConfig
from router.domain import Lane
from router.forwarding import ModelRewriter, Selection, Translation
from router.runtime import Lease


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
