"""A random-weight SDXS-512-DS image model as GGUF, the smallest model sd-server runs.

stable-diffusion.cpp hard-codes Stable Diffusion layer sizes, so a "tiny" image model still
has the real SDXS-512-DS architecture: a CLIP-L text encoder, a small UNet without a middle
block and a TAESD autoencoder (about 441 M parameters). `data/sdxs_512_ds_tensors.json` lists
every tensor by the name and ggml shape stable-diffusion.cpp expects; it detects SDXS-512-DS
from the names alone (a 768-wide CLIP token embedding, UNet input blocks, no middle block 1,
no output block 7.1), so the GGUF needs no metadata.

File types: matrices (2-D) in Q4_0 by default; convolution kernels in F16, the type
stable-diffusion.cpp keeps them in anyway (their 3-wide rows cannot be block-quantized);
norms, biases and the position embedding in F32. That is about 520 MB on disk.

Weights are noise drawn directly as encoded bits (no float draw, no quantization pass), so
the 441 M parameters take seconds, and tensors are streamed to disk one at a time.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np

TENSOR_LIST = Path(__file__).with_name("data") / "sdxs_512_ds_tensors.json"
MODEL_NAME = "tensor-router demo SDXS-512-DS (random weights)"

QUANT_TYPES = {
    "q4_0": gguf.GGMLQuantizationType.Q4_0,
    "q8_0": gguf.GGMLQuantizationType.Q8_0,
    "f16": gguf.GGMLQuantizationType.F16,
}
_F32 = gguf.GGMLQuantizationType.F32
_F16 = gguf.GGMLQuantizationType.F16

# float16 bit patterns: sign and mantissa random, exponent fixed at 2**-7, so every weight
# has a magnitude in [0.0078, 0.0156): noise of a sane scale for any layer width.
_F16_KEEP_MASK = np.uint16(0x83FF)
_F16_EXPONENT = np.uint16((15 - 7) << 10)
# Block scales: Q4_0 codes are 0..15 around 8, Q8_0 codes -128..127, so these put the
# weights in about the same range as the F16 ones.
_BLOCK_SCALE = {gguf.GGMLQuantizationType.Q4_0: 0.002, gguf.GGMLQuantizationType.Q8_0: 0.0001}


@dataclass(frozen=True)
class TensorPlan:
    name: str
    ne: tuple[int, ...]  # ggml order: fastest-varying dimension first
    qtype: gguf.GGMLQuantizationType

    @property
    def n_elements(self) -> int:
        return math.prod(self.ne)

    @property
    def nbytes(self) -> int:
        block, size = gguf.GGML_QUANT_SIZES[self.qtype]
        return self.n_elements // block * size


def load_tensor_list(path: Path = TENSOR_LIST) -> list[tuple[str, tuple[int, ...]]]:
    """(name, ggml ne) for each SDXS-512-DS tensor, as dumped from stable-diffusion.cpp."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    return [(name, tuple(int(n) for n in ne)) for name, ne in data["tensors"]]


def _choose_type(
    name: str, ne: tuple[int, ...], matrix_type: gguf.GGMLQuantizationType
) -> gguf.GGMLQuantizationType:
    if len(ne) == 1 or name.endswith("position_embedding.weight"):
        return _F32  # small, and sd.cpp keeps them in F32 regardless
    if len(ne) == 2:
        block = gguf.GGML_QUANT_SIZES[matrix_type][0]
        return matrix_type if ne[0] % block == 0 else _F16
    return _F16  # convolution kernels


def plan_tensors(quant: str = "q4_0", tensor_list: Path = TENSOR_LIST) -> list[TensorPlan]:
    try:
        matrix_type = QUANT_TYPES[quant]
    except KeyError:
        raise ValueError(f"quant must be one of {sorted(QUANT_TYPES)}, not {quant!r}") from None
    return [
        TensorPlan(n, ne, _choose_type(n, ne, matrix_type))
        for n, ne in load_tensor_list(tensor_list)
    ]


def _random_f16(count: int, rng: np.random.Generator) -> np.ndarray:
    bits = rng.integers(0, 1 << 16, size=count, dtype=np.uint16)
    bits &= _F16_KEEP_MASK
    bits |= _F16_EXPONENT
    return bits.view(np.float16)


def _random_blocks(plan: TensorPlan, rng: np.random.Generator) -> np.ndarray:
    """Raw quantized blocks: a float16 scale, then random codes (any byte is a valid code)."""
    block, size = gguf.GGML_QUANT_SIZES[plan.qtype]
    n_blocks = plan.n_elements // block
    raw = rng.integers(0, 1 << 16, size=(n_blocks * size + 1) // 2, dtype=np.uint16)
    blocks = raw.view(np.uint8)[: n_blocks * size].reshape(n_blocks, size)
    blocks[:, :2] = np.frombuffer(np.float16(_BLOCK_SCALE[plan.qtype]).tobytes(), dtype=np.uint8)
    rows = plan.n_elements // plan.ne[0]
    return blocks.reshape(rows, -1)  # numpy byte shape: (rows, bytes per row)


def _tensor_data(plan: TensorPlan, rng: np.random.Generator) -> np.ndarray:
    shape = tuple(reversed(plan.ne))  # numpy order
    if plan.qtype == _F32:
        if len(plan.ne) == 1:
            # Norm scales 1 and biases 0: every 1-D weight in SDXS is a norm scale.
            fill = 1.0 if plan.name.endswith(".weight") else 0.0
            return np.full(shape, fill, dtype=np.float32)
        return _random_f16(plan.n_elements, rng).astype(np.float32).reshape(shape)
    if plan.qtype == _F16:
        return _random_f16(plan.n_elements, rng).reshape(shape)
    return _random_blocks(plan, rng)


def _declare(writer: gguf.GGUFWriter, plan: TensorPlan) -> None:
    shape = tuple(reversed(plan.ne))
    if plan.qtype in (_F32, _F16):
        dtype = np.float32 if plan.qtype == _F32 else np.float16
        writer.add_tensor_info(plan.name, shape, np.dtype(dtype), plan.nbytes)
        return
    byte_shape = (*shape[:-1], plan.nbytes // (plan.n_elements // plan.ne[0]))
    writer.add_tensor_info(
        plan.name, byte_shape, np.dtype(np.uint8), plan.nbytes, raw_dtype=plan.qtype
    )


def iter_tensor_data(plans: list[TensorPlan], seed: int) -> Iterator[tuple[TensorPlan, np.ndarray]]:
    rng = np.random.default_rng(seed)
    for plan in plans:
        yield plan, _tensor_data(plan, rng)


def write_sdxs_gguf(path: Path, *, seed: int, quant: str = "q4_0") -> Path:
    """Write the random-weight SDXS-512-DS GGUF to `path` (about 520 MB) and return it.

    A 64x64 image in 1 step then takes about a second in sd-server; the picture is noise.
    """
    plans = plan_tensors(quant)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    writer = gguf.GGUFWriter(partial, arch="sdxs")
    writer.add_name(MODEL_NAME)
    for plan in plans:
        _declare(writer, plan)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for _plan, data in iter_tensor_data(plans, seed):
        writer.write_tensor_data(data)
    writer.close()
    partial.replace(path)  # never leave a truncated model under the real name
    return path
