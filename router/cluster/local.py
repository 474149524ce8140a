"""This node's own records, as the snapshot it sends to the master.

Identity must hold across machines, where the same model sits in different folders: the config
hash covers the `.kcpps` settings with every file path reduced to its file name, and the model
hash covers the component files' SHA-256 once the catalog has hashed them all (until then, their
names and sizes, marked so: docs/cluster.md "Identity").
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from backends.base import positive_int
from router.cluster.guardians import has_vision
from router.cluster.memory import NodeMemory
from router.cluster.protocol import PROTOCOL_VERSION, DeviceMemory, NodeModel, Snapshot
from router.config import ModelConfig
from router.runtime import RuntimeView


def _digest(value: Any) -> str:
    data = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(data.encode()).hexdigest()


def config_hash(config: ModelConfig) -> str:
    paths = {str(p) for p in config.components.values()}

    def portable(value: Any) -> Any:
        if isinstance(value, str) and value in paths:
            return Path(value).name
        if isinstance(value, list):
            return [portable(v) for v in value]
        return value

    return _digest({k: portable(v) for k, v in config.raw.items()})


def model_hash(config: ModelConfig) -> str:
    hashes: Mapping[str, str] = config.asset_sha256
    if config.components and set(hashes) >= set(config.components):
        return _digest(sorted((k, hashes[k]) for k in config.components))
    fingerprint = []
    for key, path in sorted(config.components.items()):
        try:
            size = path.stat().st_size
        except OSError:
            size = -1
        fingerprint.append((key, path.name, size))
    return "names:" + _digest(fingerprint)


def node_models(
    configs: Iterable[ModelConfig],
    views: Iterable[RuntimeView],
    *,
    disabled: set[str],
    missing: Mapping[str, tuple[str, ...]],
    memory: NodeMemory | None = None,
    prefixes: Mapping[str, tuple[str, ...]] | None = None,
) -> tuple[NodeModel, ...]:
    """`memory`: the node's last memory reading (each model's memory and estimate);
    `prefixes`: per configuration, the conversation prefixes it holds (the KV library)."""
    loaded = {v.config.id for v in views if v.ready}
    memory = memory or NodeMemory()
    prefixes = prefixes or {}
    records = []
    for config in configs:
        records.append(
            NodeModel(
                local_id=config.id,
                local_image_id=config.image_id,
                filename=config.path.name,
                lanes=tuple(sorted(config.lanes)),
                backend_mode=config.backend_mode.value,
                model_hash=model_hash(config),
                config_hash=config_hash(config),
                capabilities=tuple(sorted(lane.value for lane in config.lanes)),
                context_length=context_length(config),
                parallel=parallel_slots(config),
                multimodal=has_vision(config),
                available=not missing.get(config.id),
                loaded=config.id in loaded,
                disabled=config.id in disabled,
                memory=memory.resident.get(config.id),
                estimate=memory.estimates.get(config.id),
                evicts=memory.evicts.get(config.id),
                prefixes=prefixes.get(config.id, ()),
            )
        )
    return tuple(records)


def _serve_arg(config: ModelConfig, flag: str) -> int | None:
    """A positive integer vLLM flag in `serve_args` (`--flag N` or `--flag=N`)."""
    args = list(config.serve_args)
    for index, word in enumerate(args):
        value = None
        if word == flag and index + 1 < len(args):
            value = args[index + 1]
        elif word.startswith(flag + "="):
            value = word.split("=", 1)[1]
        if value is not None and value.isdigit() and int(value) > 0:
            return int(value)
    return None


def context_length(config: ModelConfig) -> int | None:
    """The window the configuration states: `contextsize`, else vLLM's max model length."""
    return (
        positive_int(config, "contextsize")
        or positive_int(config, "max_model_length")
        or _serve_arg(config, "--max-model-len")
    )


def parallel_slots(config: ModelConfig) -> int | None:
    """Parallel slots the configuration states (llama.cpp `parallel`, vLLM's sequences)."""
    return (
        positive_int(config, "parallel")
        or positive_int(config, "parallelrequests")
        or positive_int(config, "max_number_sequences")
        or _serve_arg(config, "--max-num-seqs")
    )


def snapshot(
    node_id: str,
    node_url: str,
    models: tuple[NodeModel, ...],
    devices: tuple[DeviceMemory, ...] = (),
) -> Snapshot:
    return Snapshot(
        protocol=PROTOCOL_VERSION,
        node_id=node_id,
        node_url=node_url,
        models=models,
        devices=devices,
    )
