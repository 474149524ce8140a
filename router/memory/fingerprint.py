"""The fingerprint of what decides a configuration's memory (pure: no I/O).

A measured figure is kept per configuration id and this fingerprint (router/memory/figures.py),
so a figure is reused only for the launch it was measured on. It covers:

- the backend family and the lane (one .kcpps can run a text and an embeddings server);
- the .kcpps file's sha256 (every mapped setting: context, parallel slots, `quantkv`,
  `gpulayers`, batch size, flash attention, the model paths);
- the model files' sha256 where the catalog has hashed them (a file replaced at the same path);
- the llama options the estimate reads (explicitly, so the key says what it stands for);
- the GPUs the launch may use and the program section's `extra_args` (router settings, outside
  the .kcpps: `-c` there overrides the file's context).

A model file's hash is computed in the background (router/config/catalog.py), so a load before
it is known records under a fingerprint without it; once it is known the fingerprint changes
and the estimate is used until the next load measures again: a missed figure, never a stale one.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict

from router.config import ModelConfig
from router.config.schema import PROGRAM_SECTIONS, ProgramSection, Settings
from router.domain import Family, Lane
from router.memory.devices import Device
from router.memory.launch import gpus_for, llama_options, vllm_utilization

VERSION = 1  # bump when the inputs change meaning: old figures then stop matching


def fingerprint(
    config: ModelConfig,
    lane: Lane,
    family: Family,
    gpus: Sequence[str] = (),
    extra_args: Sequence[str] = (),
) -> str:
    """A short hex digest of the inputs listed in the module docstring."""
    inputs: dict[str, object] = {
        "v": VERSION,
        "family": family.value,
        "lane": lane.value,
        "config": config.config_sha256,
        "assets": dict(sorted(config.asset_sha256.items())),
        "gpus": list(gpus),
        "extra_args": list(extra_args),
    }
    if family in (Family.LLAMACPP, Family.KOBOLD):
        inputs["llama"] = asdict(llama_options(config, lane))
    if family is Family.VLLM:
        inputs["vllm"] = {"utilization": vllm_utilization(config), "args": list(config.serve_args)}
    text = json.dumps(inputs, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def launch_fingerprint(
    config: ModelConfig,
    lane: Lane,
    family: Family,
    settings: Settings,
    devices: Sequence[Device],
) -> str:
    """The fingerprint of a launch under these settings on a machine with these devices
    (what the measurement records under and what the ledger passes to `Figures.lookup`)."""
    section = getattr(settings, PROGRAM_SECTIONS[family])
    own = isinstance(section, ProgramSection)
    env: Mapping[str, str] = section.env if own else {}
    extra: tuple[str, ...] = tuple(section.extra_args) if own else ()
    gpus = gpus_for(config, family, lane, [d for d in devices if d.is_gpu], env)
    return fingerprint(config, lane, family, gpus, extra)


__all__ = ["VERSION", "fingerprint", "launch_fingerprint"]
