"""Router to router: the node routes `/router/v1/node/...` (cluster token only), and the
master's relays to its nodes: inference for a model a slave serves (`relay`), site calls that
name another node (`relay_named`, the dispatcher's step), site reads merged over the whole
cluster (`FANOUT`), and the cluster's models in the client listings (`cluster_models`).

`HANDLERS` is the node routes' table. The client surfaces (router/api/inference) and the site
routes import the relays from this face.
"""

from router.api.node import node
from router.api.node.cluster_models import (
    TEXT_SIDE,
    find_remote,
    loaded,
    ollama_tag,
    openai_entry,
    remote_only,
    router_entry,
)
from router.api.node.embeddings_relay import embeddings_target
from router.api.node.inference_relay import relay, remote_target, stt_target, target_on
from router.api.node.site_fanout import FANOUT
from router.api.node.site_relay import relay_named
from router.edge import Handler

HANDLERS: dict[str, Handler] = {**node.HANDLERS}

__all__ = [
    "FANOUT",
    "HANDLERS",
    "TEXT_SIDE",
    "embeddings_target",
    "find_remote",
    "loaded",
    "ollama_tag",
    "openai_entry",
    "relay",
    "relay_named",
    "remote_only",
    "remote_target",
    "router_entry",
    "stt_target",
    "target_on",
]
