"""Router to router: the node routes `/router/v1/node/...` (cluster token only), and the
master's site relays to its nodes: site calls that name another node (`relay_named`, the
dispatcher's step) and site reads merged over the whole cluster (`FANOUT`). The inference
relay and the cluster's models in the client listings are part of the inference pipeline
(router/inference).

`HANDLERS` is the node routes' table. The site routes import the relays from this face.
"""

from router.api.node import node
from router.api.node.site_fanout import FANOUT
from router.api.node.site_relay import relay_named
from router.edge import Handler

HANDLERS: dict[str, Handler] = {**node.HANDLERS}

__all__ = ["FANOUT", "HANDLERS", "relay_named"]
