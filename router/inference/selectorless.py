"""Selectorless embeddings served on this node (the contract's Embedding APIs section).

The lane's active embedding runtime; else the default embedding backend, a loaded runtime
that answers embeddings for the model it holds (router/runtime/default_embedding.py); else
the refusal naming every embedding model one could select, the cluster's on a master. Never
a load. On a master the request may first be placed on another node
(router/inference/embeddings_relay.py); this is what the node that serves it decides.
"""

from __future__ import annotations

from aiohttp import web

from router.appkeys import CATALOG, RUNTIMES
from router.config import ModelConfig
from router.domain import Lane
from router.errors import BadRequest
from router.inference.remote_models import remote_only
from router.runtime import active_view
from router.runtime.default_embedding import no_embedding_model, passthrough_views

_EMBEDDINGS = frozenset({Lane.EMBEDDINGS})


def local_embeddings(request: web.Request, path: str, method: str) -> tuple[ModelConfig, Lane]:
    """The configuration and lane that serve an unnamed embeddings request here, `path`
    being the backend path it is sent to (`/v1/embeddings` for Ollama's translated routes)."""
    views = request.app[RUNTIMES].views()
    active = active_view(Lane.EMBEDDINGS, views)
    if active is not None and Lane.EMBEDDINGS in active.config.lanes:
        return active.config, Lane.EMBEDDINGS
    default = passthrough_views(views, path, method)
    if default:
        return default[0].config, default[0].lane
    raise refusal(request)


def refusal(request: web.Request) -> BadRequest:
    """No loaded runtime serves it: the embedding models of this node, and of the cluster
    when this node is its master."""
    names = [c.id for c in request.app[CATALOG].configs() if Lane.EMBEDDINGS in c.lanes]
    names += [p.public_id for p in remote_only(request, _EMBEDDINGS)]
    return no_embedding_model(names)
