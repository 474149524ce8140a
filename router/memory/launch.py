"""What a configuration's launch says about its memory: llama options and the devices it uses
(pure: reads the ModelConfig, never the disk).

Device rules (issue 25): `gpulayers` 0 or `usecpu` = the host only; otherwise the GPUs the
launch may see: `usecuda` device ids when given, narrowed by `CUDA_VISIBLE_DEVICES` in the
program's `env`; vLLM runs on every visible GPU. No GPU on the machine = the host.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from backends.base import flag_set, positive_int
from backends.llamacpp import text_context_total, text_slots
from router.config import ModelConfig
from router.domain import Family, Lane
from router.memory.devices import Device
from router.memory.estimate import LlamaOptions

_KV_LEGACY = {0: "f16", 1: "q8_0", 2: "q4_0"}


def llama_options(config: ModelConfig, lane: Lane) -> LlamaOptions:
    raw = config.raw
    separate_embed = lane is Lane.EMBEDDINGS and "embeddingsmodel" in config.components
    # The text lane runs `text_slots` slots of `contextsize` each (backends/llamacpp.py); the
    # embeddings server gets no -np, so its automatic slots share one cache of -c cells.
    slots = text_slots(config) if lane is Lane.TEXT else None
    if separate_embed:
        context = positive_int(config, "embeddingsmaxctx")
        layers: int | None = 999 if flag_set(config, "embeddingsgpu") else 0
    else:
        context = text_context_total(config) if slots else positive_int(config, "contextsize")
        layers = _whole(raw.get("gpulayers"))
        layers = None if layers is None or layers < 0 else layers
    if flag_set(config, "usecpu"):
        layers = 0
    quant = _kv_type(raw.get("quantkv"))
    batch = positive_int(config, "batchsize")
    return LlamaOptions(
        context=context,
        parallel=slots,
        cache_k=_kv_type(raw.get("cache_type_k")) or quant or "f16",
        cache_v=_kv_type(raw.get("cache_type_v")) or quant or "f16",
        flash_attention=not flag_set(config, "noflashattention"),
        ubatch=min(512, batch) if batch else 512,
        gpu_layers=layers,
        kv_on_host=flag_set(config, "lowvram"),
    )


def gpus_for(
    config: ModelConfig,
    family: Family,
    lane: Lane,
    gpus: Sequence[Device],
    env: Mapping[str, str],
) -> tuple[str, ...]:
    """The GPU device ids a launch uses; () = host only."""
    visible = _visible(gpus, env.get("CUDA_VISIBLE_DEVICES"))
    if not visible:
        return ()
    if family is Family.VLLM:
        return tuple(d.id for d in visible)
    if family in (Family.LLAMACPP, Family.KOBOLD) and llama_options(config, lane).gpu_layers == 0:
        return ()
    if flag_set(config, "usecpu"):
        return ()
    chosen = _usecuda_ids(config.raw.get("usecuda"))
    if chosen:
        # usecuda ids count within the visible devices, as CUDA numbers them.
        picked = [visible[i] for i in chosen if i < len(visible)]
        return tuple(d.id for d in picked) or (visible[0].id,)
    return tuple(d.id for d in visible)


def vllm_utilization(config: ModelConfig) -> float | None:
    args = list(config.serve_args)
    for i, arg in enumerate(args):
        name, _, value = arg.partition("=")
        if name == "--gpu-memory-utilization":
            text = value or (args[i + 1] if i + 1 < len(args) else "")
            try:
                return float(text)
            except ValueError:
                return None
    return None


def _visible(gpus: Sequence[Device], setting: str | None) -> list[Device]:
    if setting is None:
        return list(gpus)
    wanted = [int(p) for p in setting.split(",") if p.strip().isdigit()]
    if setting.strip() and not wanted:
        return list(gpus)  # UUIDs or MIG names: not mapped here, all GPUs counted
    by_index = {d.index: d for d in gpus}
    return [by_index[i] for i in wanted if i in by_index]


def _usecuda_ids(value: object) -> list[int]:
    if not isinstance(value, list):
        return []
    return [int(v) for v in value if isinstance(v, str) and v.isdigit()] + [
        v for v in value if isinstance(v, int) and not isinstance(v, bool)
    ]


def _kv_type(value: object) -> str | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return _KV_LEGACY.get(value)
    return value.lower() if isinstance(value, str) and value.strip() else None


def _whole(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        return int(value)
    except ValueError:
        return None


__all__ = ["gpus_for", "llama_options", "vllm_utilization"]
