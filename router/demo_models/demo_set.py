"""The demo set `make run` serves when configs/ points at no real model: tiny models, their
.kcpps files and a router.yaml, written into one data folder and reused on later runs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import yaml

from router.demo_models.gguf_llama import generate_text_models
from router.demo_models.kcpps_writer import write_kcpps, write_text_kcpps


def generate_demo_models(
    out_dir: Path, *, image: bool = False, whisper: bool = True, vision: bool = False
) -> dict[str, Path]:
    """Models under out_dir/models, configs under out_dir/kcpps; returns name -> file.

    `vision` adds `chat-vision.kcpps`: chat-a with the generated projector (`mmproj`).
    """
    models_dir = out_dir / "models"
    kcpps_dir = out_dir / "kcpps"
    written: dict[str, Path] = dict(generate_text_models(models_dir))
    write_text_kcpps(kcpps_dir, written)
    if vision:
        written["mmproj"] = write_vision_demo(models_dir, kcpps_dir, written["chat-a"])
    if whisper:
        model = _written_once(models_dir / "whisper-tiny.bin", _write_whisper)
        written["whisper"] = model
        write_kcpps(kcpps_dir / "whisper.kcpps", extra={"whispermodel": model})
    if image:
        written["sdxs"] = _written_once(models_dir / "sdxs.gguf", _write_sdxs)
        write_kcpps(kcpps_dir / "sdxs.kcpps", extra={"sdmodel": written["sdxs"]})
    return written


def _written_once(target: Path, write: Callable[[Path], object]) -> Path:
    """`target`, written only when missing: a later run reuses the file."""
    if not target.is_file():
        write(target)
    return target


# The writers import their modules when called, so a set without them does not load them.
def _write_whisper(target: Path) -> None:
    from router.demo_models.whisper_ggml import write_whisper_ggml

    write_whisper_ggml(target, seed=4)


def _write_sdxs(target: Path) -> None:
    from router.demo_models.sdxs import write_sdxs_gguf

    write_sdxs_gguf(target, seed=5)


def write_vision_demo(models_dir: Path, kcpps_dir: Path, text_model: Path) -> Path:
    """`mmproj.gguf` (about 120 KB, written in milliseconds) and `chat-vision.kcpps` pairing it
    with `text_model`, which must be 64 wide like the demo chat models; returns the projector."""
    from router.demo_models.gguf_mmproj import write_mmproj_gguf

    projector = models_dir / "mmproj.gguf"
    if not projector.is_file():
        write_mmproj_gguf(projector, seed=6)
    write_kcpps(
        kcpps_dir / "chat-vision.kcpps", model_param=text_model, extra={"mmproj": projector}
    )
    return projector


def write_demo_router_yaml(out_dir: Path, base: Path | None = None) -> Path:
    """A router.yaml for the demo set: the example's settings with config_dir pointed at it."""
    settings = yaml.safe_load(base.read_text()) if base and base.is_file() else {}
    settings = settings or {}
    settings.setdefault("models", {})["config_dir"] = str((out_dir / "kcpps").resolve())
    settings.setdefault("analytics", {})["database_path"] = str(
        (out_dir / "router.sqlite").resolve()
    )
    target = out_dir / "router.yaml"
    target.write_text(
        "# Written by `tensor-router demo-config`: the demo models in this folder.\n"
        + yaml.safe_dump(settings, sort_keys=False)
    )
    return target
