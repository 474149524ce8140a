"""Tiny random-weight GGUF models that the real llama-server loads: a LLaMA chat model and a
BERT embedding model. Nothing is downloaded; the weights are noise, so output text is noise too.

Shapes are given in numpy order (rows first); GGUF stores the reverse, which is what llama.cpp's
tensor checks see (e.g. `token_embd` is numpy (n_vocab, n_embd) = ggml {n_embd, n_vocab}).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import gguf
import numpy as np

CHAT_A_NAME = "tensor-router demo chat A"
CHAT_B_NAME = "tensor-router demo chat B"
EMBED_NAME = "tensor-router demo embed"

WORD_START = "\u2581"  # SentencePiece / llama.cpp WPM marker for "a word begins here"

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

# Enough words that prompts in tests tokenize to real pieces, not only byte fallbacks.
_WORDS = (
    "the a an and of to in is it you that he was for on are with as I his they be at one have "
    "this from or had by hot word but what some we can out other were all there when up use your "
    "how said each she which do their time if will way about many then them write would like so "
    "these her long make thing see him two has look more day could go come did number sound no "
    "most people my over know water than call first who may down side been now find hello world "
    "say tell story test model router answer question embed text"
).split()


@dataclass
class _Vocab:
    tokens: list[str] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)
    types: list[int] = field(default_factory=list)

    def add(self, piece: str, score: float, kind: gguf.TokenType) -> int:
        if piece in self.tokens:  # duplicates would make text_to_token ambiguous
            return self.tokens.index(piece)
        self.tokens.append(piece)
        self.scores.append(score)
        self.types.append(int(kind))
        return len(self.tokens) - 1


def _printable_chars() -> list[str]:
    return [chr(c) for c in range(0x21, 0x7F)]


def _spm_vocab() -> tuple[_Vocab, dict[str, int]]:
    """SentencePiece-style vocabulary; ids of the special tokens by role."""
    v = _Vocab()
    ids = {
        "unk": v.add("<unk>", 0.0, gguf.TokenType.UNKNOWN),
        "bos": v.add("<s>", 0.0, gguf.TokenType.CONTROL),
        "eos": v.add("</s>", 0.0, gguf.TokenType.CONTROL),
        "im_start": v.add("<|im_start|>", 0.0, gguf.TokenType.CONTROL),
        "eot": v.add("<|im_end|>", 0.0, gguf.TokenType.CONTROL),
    }
    # Byte fallback: any UTF-8 the pieces below cannot spell is emitted byte by byte.
    for b in range(256):
        v.add(f"<0x{b:02X}>", 0.0, gguf.TokenType.BYTE)
    # The SPM merger only joins two existing pieces, so every prefix of a word must be a piece;
    # scores grow with length so the merger prefers the longest piece.
    v.add(WORD_START, -1.0, gguf.TokenType.NORMAL)
    for ch in _printable_chars():
        v.add(ch, -1.0, gguf.TokenType.NORMAL)
    for word in _WORDS:
        piece = WORD_START + word
        for end in range(2, len(piece) + 1):
            v.add(piece[:end], float(end), gguf.TokenType.NORMAL)
    return v, ids


def _wpm_vocab() -> tuple[_Vocab, dict[str, int]]:
    """WordPiece vocabulary as llama.cpp stores it: word starts carry U+2581, no `##`."""
    v = _Vocab()
    ids = {
        "pad": v.add("[PAD]", 0.0, gguf.TokenType.CONTROL),
        "unk": v.add("[UNK]", 0.0, gguf.TokenType.CONTROL),
        "cls": v.add("[CLS]", 0.0, gguf.TokenType.CONTROL),
        "sep": v.add("[SEP]", 0.0, gguf.TokenType.CONTROL),
        "mask": v.add("[MASK]", 0.0, gguf.TokenType.CONTROL),
    }
    # llama.cpp lowercases before WordPiece, so lowercase pieces cover any ASCII word.
    for ch in sorted({c.lower() for c in _printable_chars()}):
        v.add(WORD_START + ch, 0.0, gguf.TokenType.NORMAL)
        v.add(ch, 0.0, gguf.TokenType.NORMAL)
    for word in _WORDS:
        v.add(WORD_START + word.lower(), 0.0, gguf.TokenType.NORMAL)
    return v, ids


class Weights:
    """Seeded noise at scale 0.02; norm weights 1 so activations stay finite."""

    def __init__(self, writer: gguf.GGUFWriter, seed: int) -> None:
        self._writer = writer
        self._rng = np.random.default_rng(seed)

    def noise(self, name: str, *shape: int) -> None:
        data = (self._rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(np.float32)
        self._writer.add_tensor(name, data)

    def ones(self, name: str, n: int) -> None:
        self._writer.add_tensor(name, np.ones(n, dtype=np.float32))

    def zeros(self, name: str, n: int) -> None:
        self._writer.add_tensor(name, np.zeros(n, dtype=np.float32))


def _add_vocab(writer: gguf.GGUFWriter, vocab: _Vocab, model: str) -> None:
    writer.add_tokenizer_model(model)
    writer.add_token_list(vocab.tokens)
    writer.add_token_scores(vocab.scores)
    writer.add_token_types(vocab.types)


def start_gguf(path: Path, arch: str, name: str) -> gguf.GGUFWriter:
    """A writer for an all-F32 GGUF of `arch`, named `name`: the first keys of every demo file."""
    writer = gguf.GGUFWriter(os.fspath(path), arch)
    writer.add_name(name)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    return writer


def _add_sizes(
    writer: gguf.GGUFWriter, *, n_ctx: int, n_embd: int, n_layer: int, n_ff: int, n_head: int
) -> None:
    """The transformer sizes LLaMA and BERT share, in the order both files carry them."""
    writer.add_context_length(n_ctx)
    writer.add_embedding_length(n_embd)
    writer.add_block_count(n_layer)
    writer.add_feed_forward_length(n_ff)
    writer.add_head_count(n_head)


def finish_gguf(writer: gguf.GGUFWriter) -> None:
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _llama_tensors(
    w: Weights, *, n_vocab: int, n_layer: int, n_embd: int, n_ff: int, n_embd_kv: int
) -> None:
    w.noise("token_embd.weight", n_vocab, n_embd)
    # No `output.weight`: llama.cpp then reuses token_embd (tied embeddings), halving the vocab cost.
    w.ones("output_norm.weight", n_embd)
    for i in range(n_layer):
        p = f"blk.{i}."
        w.ones(p + "attn_norm.weight", n_embd)
        for proj in ("attn_q", "attn_output"):
            w.noise(p + proj + ".weight", n_embd, n_embd)
        for proj in ("attn_k", "attn_v"):  # narrower than attn_q under grouped-query attention
            w.noise(p + proj + ".weight", n_embd_kv, n_embd)
        w.ones(p + "ffn_norm.weight", n_embd)
        w.noise(p + "ffn_gate.weight", n_ff, n_embd)
        w.noise(p + "ffn_up.weight", n_ff, n_embd)
        w.noise(p + "ffn_down.weight", n_embd, n_ff)


def write_llama_gguf(
    path: Path,
    *,
    seed: int,
    n_layer: int = 2,
    n_embd: int = 64,
    n_head: int = 4,
    n_ff: int = 128,
    n_ctx: int = 2048,
    n_head_kv: int | None = None,
    name: str,
) -> Path:
    """Write a random-weight LLaMA chat model with a ChatML template; returns `path`.

    `n_head_kv` below `n_head` makes it grouped-query attention (default: n_head, plain MHA).
    """
    n_head_kv = n_head if n_head_kv is None else n_head_kv
    if n_embd % n_head or n_head_kv < 1 or n_head % n_head_kv:
        raise ValueError("n_embd must be a multiple of n_head, and n_head of n_head_kv")
    vocab, ids = _spm_vocab()
    writer = start_gguf(path, "llama", name)
    _add_sizes(writer, n_ctx=n_ctx, n_embd=n_embd, n_layer=n_layer, n_ff=n_ff, n_head=n_head)
    writer.add_head_count_kv(n_head_kv)
    writer.add_rope_dimension_count(n_embd // n_head)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(len(vocab.tokens))
    _add_spm_tokens(writer, vocab, ids)
    n_embd_kv = n_embd // n_head * n_head_kv
    _llama_tensors(
        Weights(writer, seed),
        n_vocab=len(vocab.tokens),
        n_layer=n_layer,
        n_embd=n_embd,
        n_ff=n_ff,
        n_embd_kv=n_embd_kv,
    )
    finish_gguf(writer)
    return path


def _add_spm_tokens(writer: gguf.GGUFWriter, vocab: _Vocab, ids: dict[str, int]) -> None:
    """The chat model's vocabulary, its special tokens and ChatML template."""
    _add_vocab(writer, vocab, "llama")
    writer.add_unk_token_id(ids["unk"])
    writer.add_bos_token_id(ids["bos"])
    writer.add_eos_token_id(ids["eos"])
    writer.add_eot_token_id(ids["eot"])
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    writer.add_add_space_prefix(True)
    writer.add_chat_template(CHATML_TEMPLATE)


def _bert_tensors(
    w: Weights, *, n_vocab: int, n_layer: int, n_embd: int, n_ff: int, n_ctx: int
) -> None:
    w.noise("token_embd.weight", n_vocab, n_embd)
    w.noise("token_types.weight", 2, n_embd)
    w.noise("position_embd.weight", n_ctx, n_embd)
    w.ones("token_embd_norm.weight", n_embd)
    w.zeros("token_embd_norm.bias", n_embd)
    for i in range(n_layer):
        p = f"blk.{i}."
        for proj in ("attn_q", "attn_k", "attn_v", "attn_output"):
            w.noise(p + proj + ".weight", n_embd, n_embd)
            w.zeros(p + proj + ".bias", n_embd)
        w.ones(p + "attn_output_norm.weight", n_embd)
        w.zeros(p + "attn_output_norm.bias", n_embd)
        w.noise(p + "ffn_up.weight", n_ff, n_embd)
        w.zeros(p + "ffn_up.bias", n_ff)
        w.noise(p + "ffn_down.weight", n_embd, n_ff)
        w.zeros(p + "ffn_down.bias", n_embd)
        w.ones(p + "layer_output_norm.weight", n_embd)
        w.zeros(p + "layer_output_norm.bias", n_embd)


def write_bert_gguf(
    path: Path,
    *,
    seed: int,
    n_layer: int = 2,
    n_embd: int = 32,
    n_head: int = 2,
    n_ff: int = 64,
    n_ctx: int = 512,
    name: str = EMBED_NAME,
) -> Path:
    """Write a random-weight BERT embedding model (mean pooling, non-causal); returns `path`.

    Its width differs from the chat model's default so a test can tell the two apart.
    """
    if n_embd % n_head:
        raise ValueError("n_embd must be a multiple of n_head")
    vocab, ids = _wpm_vocab()
    writer = start_gguf(path, "bert", name)
    _add_sizes(writer, n_ctx=n_ctx, n_embd=n_embd, n_layer=n_layer, n_ff=n_ff, n_head=n_head)
    writer.add_layer_norm_eps(1e-12)
    writer.add_causal_attention(False)
    writer.add_pooling_type(gguf.PoolingType.MEAN)
    writer.add_token_type_count(2)
    _add_vocab(writer, vocab, "bert")
    writer.add_unk_token_id(ids["unk"])
    writer.add_bos_token_id(ids["cls"])  # llama.cpp uses BOS as BERT's [CLS]
    writer.add_sep_token_id(ids["sep"])
    writer.add_pad_token_id(ids["pad"])
    writer.add_mask_token_id(ids["mask"])
    writer.add_add_bos_token(True)
    writer.add_add_sep_token(True)
    weights = Weights(writer, seed)
    _bert_tensors(
        weights, n_vocab=len(vocab.tokens), n_layer=n_layer, n_embd=n_embd, n_ff=n_ff, n_ctx=n_ctx
    )
    finish_gguf(writer)
    return path


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _write_if_changed(path: Path, write: Callable[[Path], Path]) -> Path:
    """Write through a temp file and keep an identical existing file untouched.

    Untouched means the same mtime and inode, so watchers and content-hash caches downstream do
    not see a change on every run; a truncated or stale file is still replaced.
    """
    # Per-process temp name: parallel test workers may generate into the same folder.
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        write(tmp)
        same = (
            path.is_file()
            and path.stat().st_size == tmp.stat().st_size
            and _sha256(path) == _sha256(tmp)
        )
        if not same:
            os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def generate_text_models(out_dir: Path) -> dict[str, Path]:
    """Write `chat-a.gguf`, `chat-b.gguf` (different seeds and names) and `embed.gguf`.

    Returns {"chat-a": path, "chat-b": path, "embed": path}. Safe to call on every test run.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    jobs: dict[str, Callable[[Path], Path]] = {
        "chat-a": lambda p: write_llama_gguf(p, seed=1, name=CHAT_A_NAME),
        "chat-b": lambda p: write_llama_gguf(p, seed=2, name=CHAT_B_NAME),
        "embed": lambda p: write_bert_gguf(p, seed=3, name=EMBED_NAME),
    }
    return {key: _write_if_changed(out_dir / f"{key}.gguf", job) for key, job in jobs.items()}
