"""Cook: one `.kcpps` built from chosen components, each taken from an existing configuration
or a model file under `models.file_roots`.

`plan_cook()` is pure apart from the `resolve` and `probe` callables it is handed (the catalog
lookup and `probe_model_file`), so the handler runs it in a worker thread and tests can run it
on plain values. It never raises on bad components: every problem becomes a finding, so a
preview can show all of them at once.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from router.config import AUX_COMPONENTS, LIST_COMPONENTS, ModelConfig
from router.domain import BackendMode, Lane, family_for
from router.site.configs import Finding, is_path_like

KINDS: Mapping[str, Lane] = {
    "text": Lane.TEXT,
    "image": Lane.IMAGE,
    "embeddings": Lane.EMBEDDINGS,
    "voice": Lane.VOICE,
    "music": Lane.MUSIC,
}
# The keys that make a kind servable, the first being where a model file goes by default.
MAIN_KEYS: Mapping[str, tuple[str, ...]] = {
    "text": ("model_param",),
    "image": ("sdmodel", "sddiffusionmodel"),
    "embeddings": ("embeddingsmodel",),
    "voice": ("whispermodel", "ttsmodel"),
    "music": ("musicllm",),
}
# Every auxiliary file the parser knows, by the kind it helps (a test checks none is missing).
AUX_KEYS: Mapping[str, frozenset[str]] = {
    "text": frozenset({"mmproj", "draftmodel", "lora"}),
    "image": frozenset(k for k in AUX_COMPONENTS if k.startswith("sd")),
    "embeddings": frozenset(),
    "voice": frozenset({"ttswavtokenizer", "talkermodel", "code2wavmodel", "whispercpp_vad_model"}),
    "music": frozenset({"musicembeddings", "musicdiffusion", "musicvae"}),
}
# Thread counts that run side by side in one KoboldCpp process (text, image, speech).
THREAD_KEYS = ("threads", "sdthreads", "ttsthreads")

Probe = Literal["ok", "missing_file", "outside_file_roots", "no_file_roots"]


@dataclass
class CookPlan:
    options: dict[str, Any] = field(default_factory=dict)  # component keys, then the options
    chosen: list[tuple[int, str]] = field(default_factory=list)  # (component index, kind)
    sources: list[str] = field(default_factory=list)  # model IDs taken from configurations
    findings: list[Finding] = field(default_factory=list)

    @property
    def kinds(self) -> list[str]:
        return sorted({kind for _, kind in self.chosen})

    def error(self, code: str, message: str, field: str) -> None:
        self.findings.append(Finding("error", code, message, field))


def probe_model_file(text: str, roots: Sequence[Path]) -> tuple[Probe, str]:
    """Where a requested model file is and whether cook may use it (blocking).

    Only the path is resolved and stat-ed; the file is never opened, inside the roots or not.
    """
    path = os.path.normpath(os.path.abspath(text))
    if not roots:
        return "no_file_roots", path
    real = Path(os.path.realpath(path))
    if not any(real.is_relative_to(os.path.realpath(root)) for root in roots):
        return "outside_file_roots", path
    return ("ok" if real.exists() else "missing_file"), path


def plan_cook(
    components: Any,
    options: Mapping[str, Any],
    *,
    node_id: str,
    default_mode: BackendMode,
    resolve: Callable[[str], ModelConfig | None],
    probe: Callable[[str], tuple[Probe, str]],
    cpu_count: int,
) -> CookPlan:
    """The options of the cooked file and the findings about the mix (`options` already
    screened by `router.site.configs.screen_options`)."""
    plan = CookPlan()
    if not isinstance(components, list) or not components:
        plan.error("no_components", "components must be a non-empty list", "components")
        return plan
    for index, item in enumerate(components):
        _add_component(plan, index, item, node_id, resolve, probe)
    for key, value in options.items():
        if key in plan.options:
            plan.error(
                "duplicate_component",
                f"{key} is set by a component and again in options",
                f"options.{key}",
            )
        else:
            plan.options[key] = value
    _check_mix(plan, _mode(options.get("backend_mode"), default_mode), cpu_count)
    return plan


def _add_component(
    plan: CookPlan,
    index: int,
    item: Any,
    node_id: str,
    resolve: Callable[[str], ModelConfig | None],
    probe: Callable[[str], tuple[Probe, str]],
) -> None:
    where = f"components[{index}]"
    if not isinstance(item, dict):
        plan.error("invalid_component", "a component must be an object", where)
        return
    kind = item.get("kind")
    if not isinstance(kind, str) or kind not in KINDS:
        plan.error("unknown_kind", f"kind must be one of {', '.join(KINDS)}", f"{where}.kind")
        return
    if item.get("node_url") is not None:
        plan.error(
            "node_url_override",
            "node_url cannot be chosen; nodes are known by node_id",
            f"{where}.node_url",
        )
    if item.get("node_id") not in (None, "", node_id):
        plan.error(
            "unknown_node",
            f"components can come only from this node ({node_id})",
            f"{where}.node_id",
        )
    source = item.get("source") or ("file" if item.get("file_path") else "config")
    if source == "config":
        keys = _from_config(plan, item, kind, where, resolve)
    elif source == "file":
        keys = _from_file(plan, item, kind, where, probe)
    else:
        plan.error("unknown_source", "source must be config or file", f"{where}.source")
        return
    if keys:
        plan.chosen.append((index, kind))
    for key, value in keys.items():
        if key in LIST_COMPONENTS:
            merged = plan.options.setdefault(key, [])
            merged.extend(value if isinstance(value, list) else [value])
        elif key in plan.options:
            plan.error("duplicate_component", f"{key} is set by two components", where)
        else:
            plan.options[key] = value


def _from_config(
    plan: CookPlan,
    item: Mapping[str, Any],
    kind: str,
    where: str,
    resolve: Callable[[str], ModelConfig | None],
) -> dict[str, Any]:
    model_id = item.get("model_id") or item.get("image_id")
    param = f"{where}.model_id" if item.get("model_id") else f"{where}.image_id"
    if not isinstance(model_id, str) or not model_id:
        plan.error("missing_model_id", "a config component names model_id", f"{where}.model_id")
        return {}
    if is_path_like(model_id):
        plan.error("path_like_id", "model_id must be a model ID, not a path", param)
        return {}
    config = resolve(model_id)
    if config is None:
        plan.error("unknown_model", f"no configuration serves {model_id!r} on this node", param)
        return {}
    keys: dict[str, Any] = {}
    for key in (*MAIN_KEYS[kind], *sorted(AUX_KEYS[kind])):
        files = [str(p) for p in config.files(key)]  # absolute: the new file lives elsewhere
        if files:
            keys[key] = files if key in LIST_COMPONENTS else files[0]
    if not any(k in keys for k in MAIN_KEYS[kind]):
        plan.error("missing_component", f"{config.id} has no {kind} model", f"{where}.kind")
        return {}
    plan.sources.append(config.id)
    return keys


def _from_file(
    plan: CookPlan,
    item: Mapping[str, Any],
    kind: str,
    where: str,
    probe: Callable[[str], tuple[Probe, str]],
) -> dict[str, Any]:
    text = item.get("file_path")
    key = item.get("option_key") or MAIN_KEYS[kind][0]
    if not isinstance(text, str) or not text or "\x00" in text:
        plan.error("invalid_path", "file_path must be a file path", f"{where}.file_path")
        return {}
    if not isinstance(key, str) or key not in (*MAIN_KEYS[kind], *AUX_KEYS[kind]):
        plan.error("bad_option_key", f"option_key is not a {kind} model key", f"{where}.option_key")
        return {}
    status, path = probe(text)
    messages = {
        "no_file_roots": "model files can be chosen only when models.file_roots is set",
        "outside_file_roots": "file_path is outside models.file_roots",
        "missing_file": "file_path does not exist",
    }
    if status != "ok":
        plan.error(status, messages[status], f"{where}.file_path")
        return {}
    return {key: path}


def _mode(value: Any, default: BackendMode) -> BackendMode:
    # An invalid backend_mode is reported by the parser; the mix is judged by the default then.
    valid = {m.value for m in BackendMode}
    return BackendMode(value) if isinstance(value, str) and value in valid else default


def _check_mix(plan: CookPlan, mode: BackendMode, cpu_count: int) -> None:
    """A backend mode that cannot serve a chosen kind is an error here (the parser only warns:
    a hand-written file may carry spare keys, but a cook request asked for that kind)."""
    for index, kind in plan.chosen:
        if family_for(mode, KINDS[kind]) is None:
            plan.error(
                "mode_cannot_serve",
                f"{mode.value} mode does not serve {kind} models",
                f"components[{index}].kind",
            )
    if "ttsmodel" in plan.options and mode is BackendMode.LLAMA_SDCPP:
        plan.error(
            "mode_cannot_serve",
            "text-to-speech (ttsmodel) is served only in kobold and vllm modes",
            "options.backend_mode",
        )
    if mode is BackendMode.KOBOLD and {"image", "embeddings"} <= set(plan.kinds):
        plan.error(
            "kobold_image_embeddings",
            "one KoboldCpp process cannot serve an image model and an embeddings model "
            "together; cook them as two configurations",
            "components",
        )
    threads = sum(
        v
        for k in THREAD_KEYS
        if isinstance(v := plan.options.get(k), int) and not isinstance(v, bool) and v > 0
    )
    if threads > cpu_count:
        plan.error(
            "thread_budget",
            f"{' + '.join(THREAD_KEYS)} = {threads} is more than the {cpu_count} CPUs of this node",
            "options.threads",
        )
