"""Where one inference request is served: one pure decision (no I/O), made once per request
in router/inference/placing.py from plain facts gathered there.

The order (docs/cluster.md, docs/guardians.md, docs/lending.md):
1. a follow-up whose id was made on another node (a stored response, an sd-server job) goes
   to that node;
2. a request that may be served elsewhere, for a model whose chosen replica is on another
   node, is relayed there (held first when lending links cover that node's model);
3. an image request for a model that cannot read images is answered by its guardian;
4. a request lending links cover is offered to a helper node first;
5. else this node serves it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")  # a relay target (router.cluster.Target)
L = TypeVar("L")  # a lending link (router.lending.links.Link)


@dataclass(frozen=True, slots=True)
class Local:
    """This node serves the request."""


@dataclass(frozen=True)  # no slots: a subscripted generic sets __orig_class__
class Relay(Generic[T, L]):
    """Another node serves the request as sent. `held`: lending links of that node's model
    (the request waits here until lent or relayed); `remember`: the prefix under which an id
    the answer starts with is pinned to that node (its follow-ups go there)."""

    target: T
    held: tuple[L, ...] = ()
    remember: str | None = None


@dataclass(frozen=True, slots=True)
class Guardian:
    """The named model cannot read the request's images: its guardian answers."""


@dataclass(frozen=True)  # no slots: a subscripted generic sets __orig_class__
class Lend(Generic[L]):
    """Offered to a helper node through these links first; served here when none takes it."""

    links: tuple[L, ...]


Placement = Local | Relay[T, L] | Guardian | Lend[L]


@dataclass(frozen=True)  # no slots: a subscripted generic sets __orig_class__
class RelayFacts(Generic[T, L]):
    """What decides a relay: the node a follow-up is pinned to, the cluster's chosen remote
    replica (None: this node's replica, or not a cluster master), whether the request may be
    served elsewhere as sent, and the lending links that hold it on its way there."""

    pinned: T | None = None
    chosen: T | None = None
    relayable: bool = False
    held: Sequence[L] = ()
    remember: str | None = None

    @property
    def relays(self) -> bool:
        return self.pinned is not None or (self.relayable and self.chosen is not None)


@dataclass(frozen=True)  # no slots: a subscripted generic sets __orig_class__
class LocalFacts(Generic[L]):
    """What decides among this node's ways of serving: whether the model cannot take the
    input (images for a text-only model) and the lending links that cover it."""

    needs_guardian: bool = False
    links: Sequence[L] = ()


def place(relay: RelayFacts[T, L], local: LocalFacts[L] | None) -> Placement[T, L]:
    """The one placement rule. `local` may be None only when `relay.relays` (a relayed
    request's model need not be configured here, so nothing local is asked about it)."""
    if relay.pinned is not None:
        return Relay(relay.pinned, (), None)
    if relay.relayable and relay.chosen is not None:
        return Relay(relay.chosen, tuple(relay.held), relay.remember)
    if local is None:
        raise ValueError("a request served here needs its local facts")
    if local.needs_guardian:
        return Guardian()
    if local.links:
        return Lend(tuple(local.links))
    return Local()
