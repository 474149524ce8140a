"""What a parsed `.kcpps` is (`ModelConfig`) and the error for one that cannot be served.

Parsing lives in kcpps.py (the `router_*` keys in kcpps_router_keys.py); the rules are in
docs/kcpps.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from router.domain import BackendMode, Lane


class KcppsError(ValueError):
    """A .kcpps file that cannot be served; the message says what is wrong (never a full path)."""


@dataclass(frozen=True)
class ModelConfig:
    id: str  # text ID: the file stem
    path: Path  # the .kcpps file itself
    raw: Mapping[str, Any]  # normalized JSON (legacy keys renamed, refused keys removed)
    backend_mode: BackendMode  # `backend_mode` in the file, else settings `backend.mode`
    components: Mapping[str, Path]  # component key ("model_param", "sdmodel", ...) -> file
    lanes: frozenset[Lane]  # capabilities, from which components are present
    image_id: str | None  # stem + "-" + diffusion model stem, when an image component exists
    unload_triggers: frozenset[str] = frozenset()  # every entry (router/config/unload_policy.py)
    jinja_kwargs: Mapping[str, Any] = field(default_factory=dict)
    jinja_precedence: Literal["config", "client"] = "config"
    serve_args: tuple[str, ...] = ()
    run_embed_separate: bool = False
    config_sha256: str = ""
    asset_sha256: Mapping[str, str] = field(default_factory=dict)  # component key -> hex
    ignored_keys: tuple[str, ...] = ()  # router-owned keys removed from `raw`
    warnings: tuple[str, ...] = ()  # components present that this backend mode cannot serve
    aliases: tuple[str, ...] = ()  # `router_aliases`: more public names (whisper-1, gpt-4o-mini)
    kv_persist: Literal["on", "off", "auto"] = "auto"  # `router_kv_persist` (docs/swaps.md)
    pinned: bool = False  # `router_pin`: never evicted for memory (docs/residency.md)
    sleep: bool = False  # `router_sleep`: vLLM sleeps instead of stopping (docs/swaps.md)
    # `router_rpc_nodes`: lending nodes this model spans (docs/cluster.md, "Pooled memory").
    rpc_nodes: tuple[str, ...] | Literal["auto"] | None = None
    # `router_vllm_nodes`: the nodes whose headless vLLM followers join this model's head.
    vllm_nodes: tuple[str, ...] | None = None

    @property
    def names(self) -> tuple[str, ...]:
        """Every public name this config answers to: its ID, image ID and aliases."""
        own = (self.id,) if self.image_id is None else (self.id, self.image_id)
        return own + self.aliases

    def model_file(self, lane: Lane) -> Path | None:
        """The main file a single-purpose backend loads for `lane` (llama_sdcpp / vllm)."""
        keys = {
            Lane.TEXT: ("model_param",),
            Lane.EMBEDDINGS: ("embeddingsmodel", "model_param"),
            Lane.IMAGE: ("sdmodel", "sddiffusionmodel"),
            Lane.VOICE: ("whispermodel", "ttsmodel"),
            Lane.MUSIC: ("musicllm",),
        }[lane]
        for key in keys:
            if key in self.components:
                return self.components[key]
        return None

    def files(self, key: str) -> tuple[Path, ...]:
        """Every file of a component; list keys (`sdlora`) appear as `sdlora[0]`, `sdlora[1]`."""
        if key in self.components:
            return (self.components[key],)
        found: list[Path] = []
        while f"{key}[{len(found)}]" in self.components:
            found.append(self.components[f"{key}[{len(found)}]"])
        return tuple(found)


def short(text: str, limit: int = 60) -> str:
    """A value quoted in a `KcppsError` message, cut to a readable length."""
    return text if len(text) <= limit else text[:limit] + "..."


__all__ = ["KcppsError", "ModelConfig", "short"]
