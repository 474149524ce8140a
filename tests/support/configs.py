"""Configurations built in memory for tests that need no kcpps file on disk."""

from __future__ import annotations

from pathlib import Path

from router.config import ModelConfig
from router.domain import BackendMode, Lane


def text_config(folder: Path, config_id: str = "m") -> ModelConfig:
    """A llama.cpp text configuration `config_id` whose files would live in `folder`."""
    return ModelConfig(
        id=config_id,
        path=folder / f"{config_id}.kcpps",
        raw={},
        backend_mode=BackendMode.LLAMA_SDCPP,
        components={"model_param": folder / f"{config_id}.gguf"},
        lanes=frozenset({Lane.TEXT}),
        image_id=None,
    )
