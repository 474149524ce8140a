"""Lending, the helper's side (docs/lending.md): a request its owner lent to this node.

The node inference route sets the borrowed mark (only it can: it takes the cluster token and
nothing else). A borrowed request is refused with 409 `offload_returned` while this node has
its own work on the lane, or when the model is not loaded and the link forbids a load;
otherwise it is served as this node's own and recorded here. The owner's side is
router/api/offload.py.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from aiohttp import web

from router.appkeys import BORROWED, LINKS, RUNTIMES
from router.config import ModelConfig
from router.domain import Lane
from router.errors import Conflict

OFFLOAD_HEADER = "X-Tensors-Offload"  # "1": a lent request (honoured on node routes only)
OFFLOAD_LOAD_HEADER = "X-Tensors-Offload-Load"  # "0": the link forbids loading the model
OFFLOAD_RETURNED = "offload_returned"


@contextlib.contextmanager
def serving(request: web.Request, config: ModelConfig, lane: Lane) -> Iterator[None]:
    """Around a request served here: a borrowed one is refused or counted as borrowed."""
    allow_load = request.get(BORROWED)
    if allow_load is None:
        yield
        return
    runtimes = request.app[RUNTIMES]
    table = request.app[LINKS]
    views = runtimes.views()
    active = sum(v.leases for v in views if v.lane is lane)
    own = active + runtimes.queue_length(lane) - table.borrowed.get(lane.value, 0)
    if own > 0:
        raise Conflict(f"this node has its own {lane} work; the request goes back to its owner",
                       code=OFFLOAD_RETURNED)  # fmt: skip
    if not allow_load and not any(v.config.id == config.id and v.ready for v in views):
        raise Conflict(f"{config.id!r} is not loaded and the link forbids a load",
                       code=OFFLOAD_RETURNED)  # fmt: skip
    table.borrowed[lane.value] = table.borrowed.get(lane.value, 0) + 1
    try:
        yield
    finally:
        table.borrowed[lane.value] -= 1
