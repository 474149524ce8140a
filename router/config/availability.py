"""Which component files a runtime of a configuration needs, and which of them are missing.

A configuration whose model file is absent is listed with status `missing files` and its load
is refused at once, naming the file, instead of launching a backend that dies with a cut log
(docs/kcpps.md, "Missing files").
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from router.config.kcpps import MAIN_COMPONENTS
from router.config.model_config import ModelConfig
from router.domain import Lane

MISSING_STATUS = "missing files"

# Auxiliary files, by the lane whose main model uses them (kcpps.AUX_COMPONENTS).
_AUX_LANE = {
    "mmproj": Lane.TEXT, "draftmodel": Lane.TEXT, "lora": Lane.TEXT,
    "ttswavtokenizer": Lane.VOICE, "talkermodel": Lane.VOICE, "code2wavmodel": Lane.VOICE,
    "whispercpp_vad_model": Lane.VOICE,
    "musicembeddings": Lane.MUSIC, "musicdiffusion": Lane.MUSIC, "musicvae": Lane.MUSIC,
}  # fmt: skip


def component_lane(key: str) -> Lane | None:
    """The lane a component key (`sdlora[1]` included) belongs to."""
    base = key.split("[", 1)[0]
    if base in MAIN_COMPONENTS:
        return MAIN_COMPONENTS[base]
    if base in _AUX_LANE:
        return _AUX_LANE[base]
    return Lane.IMAGE if base.startswith("sd") else None


def needed_files(config: ModelConfig, lanes: Iterable[Lane]) -> dict[str, Path]:
    """Component key -> file, for the components a runtime serving `lanes` loads."""
    wanted = set(lanes)
    out = {k: p for k, p in config.components.items() if component_lane(k) in wanted}
    if Lane.EMBEDDINGS in wanted and (main := config.model_file(Lane.EMBEDDINGS)) is not None:
        out.setdefault("model_param", main)  # an embedding-capable text model
    return out


def missing_files(config: ModelConfig, lanes: Iterable[Lane]) -> dict[str, Path]:
    """The needed files that do not exist now (a stat each: cheap, done before a load)."""
    return {k: p for k, p in needed_files(config, lanes).items() if not p.exists()}


def missing_message(model: str, missing: dict[str, Path]) -> str:
    names = ", ".join(f"{key} {path.name!r}" for key, path in sorted(missing.items()))
    return (
        f"model {model!r} cannot load: its model file is missing ({names}); put the file in "
        "place or fix the .kcpps"
    )
