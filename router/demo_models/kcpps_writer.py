"""Write `.kcpps` launcher configs (KoboldCpp's saved-config JSON) for the generated models.

Only the keys the router reads are written; KoboldCpp fills every missing key from its defaults,
so a short file is still a valid config. Model paths are absolute so the configs work from any
working directory.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

DEFAULT_BACKEND_MODE = "llama_sdcpp"


def write_kcpps(
    path: Path,
    *,
    model_param: Path | None = None,
    contextsize: int = 2048,
    backend_mode: str = DEFAULT_BACKEND_MODE,
    extra: Mapping[str, Any] | None = None,
) -> Path:
    """Write one `.kcpps` file; `extra` adds component keys such as `embeddingsmodel`.

    Path values in `extra` are written as absolute paths. An unchanged file is left untouched.
    """
    config: dict[str, Any] = {"backend_mode": backend_mode, "contextsize": contextsize}
    if model_param is not None:
        config["model_param"] = str(model_param.resolve())
    for key, value in (extra or {}).items():
        config[key] = str(value.resolve()) if isinstance(value, Path) else value
    text = json.dumps(config, indent=4, sort_keys=True) + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.is_file() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")
    return path


def write_text_kcpps(kcpps_dir: Path, models: Mapping[str, Path]) -> dict[str, Path]:
    """One config per generated text model: `chat-a.kcpps`, `chat-b.kcpps`, `embed.kcpps`.

    `models` is what `generate_text_models` returned. The embedding config has no
    `model_param`: it is an embeddings-only config, as KoboldCpp allows.
    """
    written = {
        name: write_kcpps(kcpps_dir / f"{name}.kcpps", model_param=models[name])
        for name in ("chat-a", "chat-b")
    }
    written["embed"] = write_kcpps(
        kcpps_dir / "embed.kcpps",
        contextsize=512,
        extra={"embeddingsmodel": models["embed"]},
    )
    return written
