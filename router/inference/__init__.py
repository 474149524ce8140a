"""The inference pipeline: what happens to a client's inference request between the handler
that reads it (router/api/inference) and the backend or node that answers it: choose the
configuration, place it (here, on another node, through a lending link, or to the guardian),
lease a runtime, forward, record. It serves no route itself (docs/architecture.md).
"""

from router.inference.admission import admit
from router.inference.context import LENT
from router.inference.lanes import active_view, choose_config, public_id, resolve_for_lane
from router.inference.override import OnLease, Override, Pins, Prepare, Serving, Upstream
from router.inference.pins import IdWatcher, WatchingRewriter, find_response_id
from router.inference.pipeline import (
    followed,
    forward,
    forward_here,
    forward_to,
    recorded,
    relayed,
)
from router.inference.placing import relay_target
from router.inference.remote_models import (
    TEXT_SIDE,
    find_remote,
    loaded,
    ollama_tag,
    openai_entry,
    remote_only,
    router_entry,
)
from router.inference.selectorless import local_embeddings

__all__ = [
    "LENT",
    "TEXT_SIDE",
    "IdWatcher",
    "OnLease",
    "Override",
    "Pins",
    "Prepare",
    "Serving",
    "Upstream",
    "WatchingRewriter",
    "active_view",
    "admit",
    "choose_config",
    "find_remote",
    "find_response_id",
    "followed",
    "forward",
    "forward_here",
    "forward_to",
    "loaded",
    "local_embeddings",
    "ollama_tag",
    "openai_entry",
    "public_id",
    "recorded",
    "relay_target",
    "relayed",
    "remote_only",
    "resolve_for_lane",
    "router_entry",
]
