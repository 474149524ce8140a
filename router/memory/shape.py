"""What a GGUF header says about a model's memory: layers, KV heads, head sizes, windows.

The only I/O of the estimate (`read_shape`, through the one GGUF reader, router/memory/gguf.py);
everything else works on `ModelShape`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from router.memory.gguf import read_header

# Architectures whose sliding-window layers follow a fixed pattern when the file states the
# window but no pattern (llama.cpp's defaults): every Nth layer is a full-attention layer.
_DEFAULT_SWA_PATTERN = {"gemma2": 2, "gemma3": 6, "gemma3n": 5, "cohere2": 4}


@dataclass(frozen=True)
class ModelShape:
    architecture: str
    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: tuple[int, ...]  # one per layer (files may store a per-layer array)
    key_length: int
    value_length: int
    n_ctx_train: int
    n_vocab: int
    n_ff: int
    tensor_bytes: int
    causal: bool = True  # encoder-only models (BERT) keep no KV cache
    sliding_window: int | None = None
    swa_layers: frozenset[int] = frozenset()  # indexes of the sliding-window layers


def read_shape(path: str) -> ModelShape | None:
    """The shape of a GGUF file, or None when it is not a readable GGUF with an architecture.
    The header comes from the one reader and its cache (router/memory/gguf.py): the status
    asks on every poll, and the inventory and the Ollama routes read the same headers."""
    header = read_header(path)
    if header is None or header.architecture is None:
        return None
    return shape_from_fields(
        header.architecture,
        header.arch_fields,
        n_vocab=header.n_vocab,
        tensor_bytes=header.tensor_bytes,
    )


def shape_from_fields(
    arch: str, f: dict[str, Any], *, n_vocab: int, tensor_bytes: int
) -> ModelShape:
    """Pure: the shape from the `{arch}.*` fields (prefix removed)."""
    n_layer = _int(f.get("block_count"))
    n_embd = _int(f.get("embedding_length"))
    n_head = _first(f.get("attention.head_count")) or 1
    kv = f.get("attention.head_count_kv")
    heads_kv = (
        tuple(_int(x) for x in kv)
        if isinstance(kv, list) and len(kv) == n_layer
        else (_first(kv) or n_head,) * n_layer
    )
    head_dim = n_embd // n_head if n_head else 0
    window = _int(f.get("attention.sliding_window")) or None
    return ModelShape(
        architecture=arch,
        n_layer=n_layer,
        n_embd=n_embd,
        n_head=n_head,
        n_head_kv=heads_kv,
        key_length=_int(f.get("attention.key_length")) or head_dim,
        value_length=_int(f.get("attention.value_length")) or head_dim,
        n_ctx_train=_int(f.get("context_length")),
        n_vocab=n_vocab or _int(f.get("vocab_size")),
        n_ff=_first(f.get("feed_forward_length")),
        tensor_bytes=tensor_bytes,
        causal=f.get("attention.causal") is not False,
        sliding_window=window,
        swa_layers=_swa_layers(arch, n_layer, window, f.get("attention.sliding_window_pattern")),
    )


def _swa_layers(arch: str, n_layer: int, window: int | None, pattern: Any) -> frozenset[int]:
    if not window:
        return frozenset()
    if isinstance(pattern, list) and len(pattern) == n_layer:
        return frozenset(i for i, swa in enumerate(pattern) if swa)
    every = _int(pattern) or _DEFAULT_SWA_PATTERN.get(arch, 0)
    if every <= 0:
        return frozenset(range(n_layer))  # a window and no pattern: every layer slides
    return frozenset(i for i in range(n_layer) if (i + 1) % every)


def _int(value: Any) -> int:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else 0


def _first(value: Any) -> int:
    """A count stored as one number, or per layer (take the largest: the memory bound)."""
    if isinstance(value, list):
        return max((_int(v) for v in value), default=0)
    return _int(value)


__all__ = ["ModelShape", "read_shape", "shape_from_fields"]
