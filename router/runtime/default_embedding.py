"""The default embedding backend: where a selectorless embeddings request goes when no
configuration with an embedding component is loaded (the contract's pass-through). Pure.

Every backend process here belongs to a loaded configuration, so the default embedding backend
is a loaded runtime that answers the embedding route for the model it already holds although
its configuration names no `embeddingsmodel`. Of the families the router runs only vLLM can:
it picks the pooling runner from the model itself (an embedding architecture, or
`--runner pooling` in `serve_args`), which the `.kcpps` does not tell. llama-server text
runtimes are started without `--embeddings` (and `extra_args` may not add it), so they answer
501; KoboldCpp answers embeddings only with `--embeddingsmodel`, which gives its configuration
the component. Passing a request to those would only relay a refusal naming a flag the user
cannot set, so they are never the default (docs/decisions.md, "Selectorless embeddings").
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from backends.registry import adapter_for
from router.domain import BackendMode, Family, Lane, family_for
from router.errors import BadRequest
from router.runtime.choice import SELECTORS
from router.runtime.state import RuntimeView

# Families whose text runtime may answer embeddings for its own model (see above).
OWN_MODEL_EMBEDDINGS: frozenset[Family] = frozenset({Family.VLLM})


def may_pass_through(
    lanes: Collection[Lane], mode: BackendMode, lane: Lane, path: str, method: str
) -> bool:
    """Can the ready runtime of a configuration with `lanes` and `mode` on `lane` be the
    default embedding backend for `method path`?"""
    if Lane.EMBEDDINGS in lanes or lane is not Lane.TEXT:
        return False
    family = family_for(mode, lane)
    return (
        family is not None
        and family in OWN_MODEL_EMBEDDINGS
        and adapter_for(family).serves(path, method)
    )


def passthrough_views(views: Iterable[RuntimeView], path: str, method: str) -> list[RuntimeView]:
    """This node's runtimes that may take `method path` as the default embedding backend:
    ready and not draining (nothing is loaded or woken for it), in configuration order."""
    found = [
        v
        for v in views
        if v.ready
        and v.active
        and may_pass_through(v.config.lanes, v.config.backend_mode, v.lane, path, method)
    ]
    return sorted(found, key=lambda v: v.config.id)


def no_embedding_model(names: Iterable[str]) -> BadRequest:
    """The answer when nothing loaded serves a selectorless embeddings request: 400 (the
    request cannot be served as sent; naming a model makes it work), listing what to name."""
    listed = ", ".join(sorted(set(names))) or "(none configured)"
    return BadRequest(
        "no embedding model is loaded and no loaded model serves embeddings (an unnamed request "
        f"never loads one); name a model with {SELECTORS}; embedding models: {listed}",
        param="model",
    )


__all__ = ["OWN_MODEL_EMBEDDINGS", "may_pass_through", "no_embedding_model", "passthrough_views"]
