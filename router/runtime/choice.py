"""Which configuration serves a request: one pure rule for every surface (no I/O).

The named model, else the lane's active runtime, else the only configuration serving the lane,
else a refusal that lists the candidates. "Active" has one meaning everywhere, loading or
ready and not draining (`RuntimeView.active`; docs/decisions.md, "The lane's active runtime").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from router.config import ModelConfig
from router.domain import Lane
from router.errors import BadRequest
from router.runtime.state import RuntimeView

Serves = Callable[[ModelConfig], bool]
SELECTORS = 'a "model" field, ?model= or the X-Tensors-Model header'
_SINGULAR = {"embeddings": "embedding"}


def active_view(lane: Lane, views: Iterable[RuntimeView]) -> RuntimeView | None:
    """The runtime loading or serving `lane` for new work. With several per lane
    (`runtime.residency: memory`): the most recently used ready one, else a loading one
    (docs/decisions.md, "A request without a model, several runtimes per lane")."""
    active = [v for v in views if lane in v.occupies and v.active]
    return max(active, key=lambda v: (v.ready, v.last_used), default=None)


def public_id(config: ModelConfig, lane: Lane) -> str:
    """The ID clients use for `config` on `lane` (image lanes have their own IDs)."""
    return config.image_id if lane is Lane.IMAGE and config.image_id else config.id


def choose_config(
    named: ModelConfig | None,
    lane: Lane,
    configs: Sequence[ModelConfig],
    views: Iterable[RuntimeView],
    *,
    serves: Serves | None = None,
    what: str | None = None,
    load_unnamed: bool = True,
) -> ModelConfig:
    """The configuration a request for `lane` goes to.

    `named`: the configuration the request named (the caller resolved it; unknown names are a
    404 there). `serves` narrows the candidates further (realtime needs vLLM), `what` names them
    in the refusal. `load_unnamed=False`: an unnamed request never picks a model that is not
    already active (embeddings: loading one is too costly a guess).
    """
    if named is not None:
        if lane not in named.lanes:
            raise BadRequest(f"model {named.id!r} has no {lane} component", param="model")
        return named

    def fits(config: ModelConfig) -> bool:
        return lane in config.lanes and (serves is None or serves(config))

    active = active_view(lane, views)
    if active is not None and fits(active.config):
        return active.config
    candidates = [c for c in configs if fits(c)]
    if load_unnamed and len(candidates) == 1:
        return candidates[0]
    raise refusal(lane, candidates, what, loaded=not load_unnamed)


def refusal(
    lane: Lane, candidates: Sequence[ModelConfig], what: str | None = None, *, loaded: bool = False
) -> BadRequest:
    """The one answer to an unnamed request no rule could place."""
    names = ", ".join(public_id(c, lane) for c in candidates) or "(none configured)"
    kind = what or str(lane)
    head = f"no {_SINGULAR.get(kind, kind)} model is loaded; " if loaded else ""
    return BadRequest(f"{head}name a model with {SELECTORS}; {kind} models: {names}", param="model")


__all__ = ["SELECTORS", "active_view", "choose_config", "public_id", "refusal"]
