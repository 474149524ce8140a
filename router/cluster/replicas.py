"""Which replica serves a request, and which node takes selectorless speech-to-text or embeddings.

Pure: the caller passes what the registry and the local runtimes say right now and a rotation
counter it owns; nothing here reads a clock or a socket.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from router.cluster.fit import Fit

R = TypeVar("R")

# A replica that holds a returning conversation's prefix keeps it unless it has more than this
# many requests (in flight and queued) above the least busy replica (docs/swaps.md, "Where
# the cache is, placement follows").
AFFINITY_SLACK = 2


def affine(
    replicas: Sequence[R],
    held: Callable[[R], int],
    load: Callable[[R], int],
    slack: int = AFFINITY_SLACK,
) -> R | None:
    """The replica holding the longest prefix of the request's conversation (`held`, in
    units; the least busy among equals, then the first), unless it is more than `slack`
    requests busier than the least busy replica; None: no affinity (the usual order)."""
    holders = [r for r in replicas if held(r) > 0]
    if not holders:
        return None
    best = max(holders, key=lambda r: (held(r), -load(r)))
    least = min(load(r) for r in replicas)
    return best if load(best) <= least + slack else None


def choose_replica(
    local: R | None,
    local_busy: bool,
    remote: Sequence[R],
    turn: int,
    fit: Callable[[R], Fit] | None = None,
) -> R | None:
    """An idle available local replica first; else the available remote replicas in rotation
    (`turn` picks which); else the busy local one (it queues there); else None (a 502).

    `fit` (router/cluster/fit.py) puts memory first: an idle local replica where the model is
    resident or fits without eviction; else the remote ones where it is resident or fits, in
    rotation (replicas that need no eviction share the work, as before); only then the idle
    local and the remote replicas whose load would evict. Without `fit` every replica fits,
    which is the order above.

    `local` is this node's replica when it is available, `remote` the available replicas on
    other nodes: the split is made once per registry change, so a request's choice is O(1)
    in the number of nodes.
    """
    rank = fit or (lambda _: Fit.FITS)
    idle = local if local is not None and not local_busy else None
    if idle is not None and rank(idle) < Fit.EVICTS:
        return idle
    spare = [r for r in remote if rank(r) < Fit.EVICTS]
    if spare:
        return spare[turn % len(spare)]
    if idle is not None:
        return idle
    if remote:
        return remote[turn % len(remote)]
    return local


@dataclass(frozen=True, slots=True)
class SttNode:
    node_id: str
    local: bool
    capable: bool
    has_loaded: bool
    active: int
    queued: int
    answered_status: bool = True


def choose_stt_node(nodes: Sequence[SttNode], turn: int) -> SttNode | None:
    """Tiers: this node with the speech model loaded; a remote node with it loaded and the
    least work; an idle capable node; this node (it queues); the remote with the shortest
    queue. Ties inside a tier rotate with `turn`."""
    capable = [n for n in nodes if n.capable and n.answered_status]
    tiers = (
        [n for n in capable if n.local and n.has_loaded],
        _least_work([n for n in capable if not n.local and n.has_loaded]),
        [n for n in capable if n.active == 0 and n.queued == 0],
        [n for n in capable if n.local],
        _least_queued([n for n in capable if not n.local]),
    )
    for tier in tiers:
        if tier:
            return tier[turn % len(tier)]
    return None


def _least_work(nodes: list[SttNode]) -> list[SttNode]:
    if not nodes:
        return []
    best = min(n.active + n.queued for n in nodes)
    return [n for n in nodes if n.active + n.queued == best]


def _least_queued(nodes: list[SttNode]) -> list[SttNode]:
    if not nodes:
        return []
    best = min(n.queued for n in nodes)
    return [n for n in nodes if n.queued == best]


@dataclass(frozen=True, slots=True, order=True)
class EmbeddingRuntime:
    """A ready runtime with an embedding component: the node and its configuration's local
    ID there (one runtime, however many public aliases the cluster lists it under)."""

    node_id: str
    local_id: str
    local: bool = False


def choose_embedding_runtime(
    runtimes: Sequence[EmbeddingRuntime], turn: int
) -> EmbeddingRuntime | None:
    """Selectorless embeddings: round-robin over the loaded embedding runtimes, each once
    (duplicates, such as aliases of one runtime, collapse); None when none is loaded."""
    unique = sorted(set(runtimes))
    return unique[turn % len(unique)] if unique else None
