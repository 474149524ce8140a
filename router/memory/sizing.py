"""The estimate for one configuration on one lane: reads the model files' headers and sizes
(the only I/O of the estimate), then applies the pure rules of `estimate.py`."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from router.config import ModelConfig
from router.domain import Family, Lane
from router.memory.devices import Device
from router.memory.estimate import (
    PROCESS_OVERHEAD,
    Estimate,
    file_estimate,
    llama_footprint,
    split_llama,
    vllm_estimate,
)
from router.memory.launch import gpus_for, llama_options, vllm_utilization
from router.memory.shape import read_shape


def estimate_config(
    config: ModelConfig,
    lane: Lane,
    family: Family,
    devices: Sequence[Device],
    env: Mapping[str, str] | None = None,
) -> Estimate:
    gpus = [d for d in devices if d.is_gpu]
    used = gpus_for(config, family, lane, gpus, env or {})
    if family is Family.VLLM:
        totals = {d.id: d.total for d in gpus if d.id in used}
        return vllm_estimate(vllm_utilization(config), totals, _bytes(config.model_file(lane)))
    if family is Family.WHISPERCPP:
        return file_estimate(family.value, _component_bytes(config, ("whispermodel",)), used)
    if family is Family.SDCPP:
        keys = tuple(k for k in config.components if k.startswith("sd"))
        return file_estimate(family.value, _component_bytes(config, keys), used)
    text = _llama(config, lane, family, used)
    if family is not Family.KOBOLD:
        return text
    # KoboldCpp holds every component of its config in one process.
    others = tuple(k for k in config.components if k != "model_param")
    extra = file_estimate("sdcpp", _component_bytes(config, others), used) if others else None
    return _merge(text, extra)


def _llama(config: ModelConfig, lane: Lane, family: Family, used: tuple[str, ...]) -> Estimate:
    path = config.model_file(Lane.TEXT if family is Family.KOBOLD else lane)
    shape = read_shape(os.fspath(path)) if path is not None and path.is_file() else None
    if shape is None:  # not a readable GGUF: the file size and a margin
        return file_estimate(family.value, _bytes(path), used)
    opts = llama_options(config, lane)
    return split_llama(llama_footprint(shape, opts, family.value), shape, opts, used)


def _merge(a: Estimate, b: Estimate | None) -> Estimate:
    if b is None:
        return a
    devices = dict(a.devices)
    for device, amount in b.devices.items():
        devices[device] = devices.get(device, 0) + amount
    # One process: its overhead is counted once.
    devices["host"] = devices.get("host", 0) - PROCESS_OVERHEAD["sdcpp"]
    detail = {k: a.detail.get(k, 0) + b.detail.get(k, 0) for k in {*a.detail, *b.detail}}
    detail["overhead"] = a.detail.get("overhead", 0)
    return Estimate(devices, detail=detail)


def _component_bytes(config: ModelConfig, keys: Sequence[str]) -> int:
    return sum(_bytes(config.components.get(k)) for k in keys)


def _bytes(path: Path | None) -> int:
    """A file's size, or a folder's (a Hugging Face model directory for vLLM); 0 if absent."""
    if path is None:
        return 0
    try:
        if path.is_dir():
            return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
        return path.stat().st_size
    except OSError:
        return 0


__all__ = ["estimate_config"]
