"""What a surface handler hands the pipeline's `forward` (router/inference/pipeline.py) when it
read, checked or rewrote the request itself: an `Override`, or a `Prepare` that makes one. Its
fields are grouped by what they are about: `Upstream`, `OnLease`, `Pins`, `Serving`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from aiohttp import web

from router.config import ModelConfig
from router.domain import Lane
from router.forwarding import ModelRewriter, Selection, Translation
from router.runtime import Lease


@dataclass(frozen=True)
class Upstream:
    """What goes to the backend in place of the client's own path and headers."""

    path_qs: str | None = None  # backend path and query; default: the request's own
    headers: Mapping[str, str] | None = None  # replaces the forwarded request headers

    @property
    def as_sent(self) -> bool:
        return self.path_qs is None and self.headers is None


@dataclass(frozen=True)
class OnLease:
    """What happens once a runtime of this node is leased (so never on another node)."""

    # May refuse (raise) or return a rewriter that also watches the response
    # (router/api/inference/responses.py remembers which runtime made a response).
    rewriter: Callable[[Lease, ModelRewriter], ModelRewriter] | None = None
    # How the backend's answer becomes the client's (Ollama translates OpenAI answers);
    # default: as it is, model IDs rewritten.
    translation: Callable[[Lease], Translation] | None = None
    # Answered by the router, nothing sent (Ollama's load request).
    answer: Callable[[Lease], web.StreamResponse] | None = None

    @property
    def changes_answer(self) -> bool:
        return self.translation is not None or self.answer is not None


@dataclass(frozen=True)
class Pins:
    """Placement data (router/cluster/placement.py), never a decision: `follow` is the pin key
    of a follow-up (a stored response, an sd-server job) whose id another node may have made;
    `remember` the prefix under which the id a relayed answer starts with is pinned to the node
    that made it. Either lets a request with an `OnLease.rewriter` be served elsewhere as sent."""

    follow: str | None = None
    remember: str | None = None


@dataclass(frozen=True)
class Serving:
    """How this node serves the request once the model is chosen."""

    # The lane of the runtime the handler chose, when it is not the route's: an unnamed
    # Ollama embedding request passed to the default embedding backend (a text runtime).
    lane: Lane | None = None
    # How long the runtime stays loaded after this request (Ollama's keep_alive; seconds,
    # math.inf = until unloaded); None leaves it as it is.
    keep_alive: float | None = None
    # Answered by the router for the chosen model without leasing (so never loading) a
    # runtime: Ollama's unload request.
    unleased: Callable[[ModelConfig, Lane], Awaitable[web.StreamResponse]] | None = None


@dataclass(frozen=True)
class Override:
    """What a surface handler changed before forwarding (voice, images, Ollama): the body it
    already read or rewrote (`selection`), what goes upstream instead of the request's own,
    what happens once a runtime is leased, its pins, and how this node serves it: `here`, the
    override used when it is placed on this node (Ollama translates only then: another node
    gets the body as sent and translates it for its own backend), and `serving`."""

    selection: Selection
    upstream: Upstream = Upstream()
    on_lease: OnLease = OnLease()
    pins: Pins = Pins()
    here: Callable[[], Override] | None = None
    serving: Serving = Serving()

    @property
    def plain(self) -> bool:
        """Forwarded as the client sent it (so another cluster node may serve it as sent)."""
        return self.on_lease == OnLease() and self._as_sent

    @property
    def relayable(self) -> bool:
        """May be served by another node as the client sent it (`on_lease.rewriter` only
        watches a local runtime; a handler that remembers relayed ids accepts a relay)."""
        pinned = self.pins.follow is not None or self.pins.remember is not None
        return self.plain or (pinned and not self.on_lease.changes_answer and self._as_sent)

    @property
    def _as_sent(self) -> bool:
        return self.upstream.as_sent and self.serving.unleased is None


# A handler that reads and checks the body itself passes this instead of an Override, so its
# refusals are recorded like every other request's.
Prepare = Callable[[], Awaitable[Override]]
