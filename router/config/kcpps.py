"""Parse one `.kcpps` file (KoboldCpp's saved launch config) -> `ModelConfig`.

Pure: takes the file's bytes; hashing of referenced model files lives in catalog.py. The one
filesystem touch is symlink resolution when `file_roots` confine model paths, because a
confinement check that ignores symlinks confines nothing. The rules are written down in
docs/kcpps.md. `ModelConfig` and `KcppsError` are in model_config.py, the checks of the
`router_*` keys in kcpps_router_keys.py, the renaming of old spellings in kcpps_legacy.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from router.config import kcpps_router_keys as router_keys
from router.config.kcpps_legacy import migrate_legacy
from router.config.model_config import KcppsError, ModelConfig, short
from router.domain import BackendMode, Lane, family_for

MAX_KCPPS_BYTES = 1 << 20  # real files are a few KB; anything larger is not a launch config
MAX_DEPTH = 32
MAX_PATH_CHARS = 4096
ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")

# Component key -> the lane it makes servable. Order matters: the first image key names the
# image ID.
MAIN_COMPONENTS: Mapping[str, Lane] = {
    "model_param": Lane.TEXT,
    "sdmodel": Lane.IMAGE,
    "sddiffusionmodel": Lane.IMAGE,
    "whispermodel": Lane.VOICE,
    "ttsmodel": Lane.VOICE,
    "embeddingsmodel": Lane.EMBEDDINGS,
    "musicllm": Lane.MUSIC,
}
# Files a main component needs or may use; they never make a lane on their own.
AUX_COMPONENTS = frozenset(
    {
        "mmproj", "draftmodel", "lora",
        "sdvae", "sdt5xxl", "sdclip1", "sdclip2", "sdlora", "sdupscaler", "sdphotomaker",
        "sdaudiovae", "sdclipvision", "sdllm", "sdllmvision", "sdcontrolnet",
        "sdhighnoisediffusionmodel",
        "ttswavtokenizer", "talkermodel", "code2wavmodel", "whispercpp_vad_model",
        "musicembeddings", "musicdiffusion", "musicvae",
    }
)  # fmt: skip
LIST_COMPONENTS = frozenset({"lora", "sdlora"})  # KoboldCpp stores these as lists of files

# Keys that would make the backend run something besides the model: refused when set.
REFUSED_KEYS: Mapping[str, str] = {
    "onready": "runs a shell command",
    "mcpfile": "starts MCP tool programs",
    # KoboldCpp's RPC workers by address (docs/kcpps.md): list lending nodes by ID instead.
    "rpctargets": "names RPC servers by address; list lending nodes in router_rpc_nodes",
}
BINARY_KEY = re.compile(r"(binary|binary_path|_bin|executable|_exe|command|cmd)$")
# Keys the router owns (address, process mode, KoboldCpp's own admin/reload and auth):
# always removed, because real saves carry them with harmless defaults.
DROPPED_KEYS = frozenset(
    {
        "host", "port", "port_param", "remotetunnel", "ssl", "nocertify", "password",
        "admin", "admindir", "adminpassword", "adminunloadtimeout", "routermode",
        "autoswapmode", "baseconfig", "config", "showgui", "launch", "benchmark", "prompt",
        "cli", "analyze", "exportconfig", "exporttemplate", "testmemory", "unpack", "version",
        # KoboldCpp's RPC worker settings (saves carry rpcport 5551): a node lends under a
        # lease instead (pooled); rpcmode other than disabled is refused (_rpc_mode).
        "rpcmode", "rpchost", "rpcport", "rpcdevice",
    }
)  # fmt: skip
# vLLM flags that would move the listener, demand a key the router does not send, or run
# code shipped with the model.
REFUSED_SERVE_FLAGS = frozenset({"--host", "--port", "--uds", "--api-key", "--trust-remote-code"})
URL_PATTERN = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def parse_kcpps(
    path: Path, data: bytes, default_mode: BackendMode, file_roots: Sequence[Path] = ()
) -> ModelConfig:
    """Validate and normalize one `.kcpps`; raises only `KcppsError`."""
    config_id = path.stem
    if not ID_PATTERN.match(config_id):
        raise KcppsError(
            "file name must be 1-128 letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
    raw = _normalize_keys(_load_object(data))
    migrate_legacy(raw)
    router_keys.check_known(raw)
    _rpc_mode(raw.get("rpcmode"))
    ignored = _strip_refused(raw)
    _check_resolved(raw)
    mode = _backend_mode(raw.get("backend_mode"), default_mode)
    components = _components(raw, path.parent)
    _check_roots(components, file_roots)
    lanes, warnings = _lanes(components, mode)
    if not lanes:
        hint = " (" + "; ".join(warnings) + ")" if warnings else ""
        raise KcppsError(
            "no servable model component: set model_param, sdmodel, "
            f"whispermodel, embeddingsmodel or musicllm{hint}"
        )
    image_id = _image_id(config_id, components) if Lane.IMAGE in lanes else None
    own_ids = (config_id,) if image_id is None else (config_id, image_id)
    return ModelConfig(
        id=config_id,
        path=path,
        raw=raw,
        backend_mode=mode,
        components=components,
        lanes=lanes,
        image_id=image_id,
        unload_triggers=router_keys.unload_triggers(raw.get("router_unload_policy")),
        jinja_kwargs=_jinja_kwargs(raw.get("jinja_kwargs")),
        jinja_precedence=router_keys.jinja_precedence(raw.get("router_jinja_kwargs_precedence")),
        serve_args=_serve_args(raw.get("serve_args")),
        run_embed_separate=router_keys.flag("run_embed_separate", raw.get("run_embed_separate")),
        aliases=router_keys.aliases(raw.get("router_aliases"), own_ids),
        kv_persist=router_keys.kv_persist(raw.get("router_kv_persist")),
        pinned=router_keys.pinned(raw.get("router_pin")),
        sleep=router_keys.sleep(raw.get("router_sleep")),
        rpc_nodes=router_keys.rpc_nodes(raw.get("router_rpc_nodes")),
        vllm_nodes=router_keys.vllm_nodes(raw.get("router_vllm_nodes"), mode),
        config_sha256=hashlib.sha256(data).hexdigest(),
        ignored_keys=ignored,
        warnings=warnings,
    )


def _load_object(data: bytes) -> dict[str, Any]:
    if len(data) > MAX_KCPPS_BYTES:
        raise KcppsError(f"file is larger than {MAX_KCPPS_BYTES} bytes")
    try:
        text = data.decode("utf-8-sig")  # Windows editors add a BOM
    except UnicodeDecodeError:
        raise KcppsError("file is not valid UTF-8") from None
    try:
        obj = json.loads(text, object_pairs_hook=_reject_duplicates)
    except RecursionError:
        raise KcppsError(f"JSON nesting deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:
        raise KcppsError(f"invalid JSON: {short(str(exc))}") from None
    if not isinstance(obj, dict):
        raise KcppsError("top level must be a JSON object")
    if not _depth_within(obj, MAX_DEPTH):
        raise KcppsError(f"JSON nesting deeper than {MAX_DEPTH} levels")
    return obj


def _reject_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # A repeated key hides one of two settings; json.loads would keep the last silently.
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {short(key)!r}")
        out[key] = value
    return out


def _depth_within(value: Any, limit: int) -> bool:
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return False
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
    return True


def _normalize_keys(obj: dict[str, Any]) -> dict[str, Any]:
    """Flag spellings (`--sd-clip-l`) become argparse dests, so refusals cannot be dodged."""
    out: dict[str, Any] = {}
    for key, value in obj.items():
        name = canonical_key(key)
        if name in out:
            raise KcppsError(f"key {short(name)!r} is given twice (in two spellings)")
        out[name] = value
    return out


def canonical_key(key: str) -> str:
    """The argparse name a key is read as (`--sd-clip-l` -> `sd_clip_l`)."""
    return key.lstrip("-").replace("-", "_") if key.startswith("-") else key


def screened_key(key: str) -> Literal["refused", "dropped"] | None:
    """How the loader treats a (canonical) key: refused when set, dropped always, else None.

    For writers (router/site/configs.py) that must leave such keys out of what they write.
    """
    if key in REFUSED_KEYS or BINARY_KEY.search(key):
        return "refused"
    return "dropped" if key in DROPPED_KEYS else None


def _strip_refused(raw: dict[str, Any]) -> tuple[str, ...]:
    """Refuse keys that would run programs; drop router-owned ones. Returns the dropped keys."""
    dropped = []
    for key in list(raw):
        value = raw[key]
        if key in REFUSED_KEYS or BINARY_KEY.search(key):
            if _is_set(value):
                why = REFUSED_KEYS.get(key, "sets a program path")
                raise KcppsError(f"{key} is not allowed: it {why}; remove it from the file")
            dropped.append(key)
            del raw[key]
        elif key in DROPPED_KEYS:
            dropped.append(key)
            del raw[key]
    return tuple(sorted(dropped))


def _rpc_mode(value: Any) -> None:
    """KoboldCpp's `rpcmode` `connect` (use RPC workers) or `host` (be one): both are the
    cluster's business here (docs/kcpps.md, "RPC keys")."""
    if value in (None, "", "disabled", False):
        return
    why = (
        "makes this process an RPC worker; a node lends memory with pooled.lend"
        if value == "host"
        else "connects to RPC workers by address; list lending nodes in router_rpc_nodes"
    )
    raise KcppsError(f"rpcmode {short(str(value))!r} is not allowed: it {why}")


def unresolved_fields(raw: Mapping[str, Any]) -> list[str]:
    """Component fields given as `<field>_hash` with no path: a portable config (docs/site.md)
    that was copied in without being resolved on this node."""
    keys = (*MAIN_COMPONENTS, *sorted(AUX_COMPONENTS))
    return [k for k in keys if f"{k}_hash" in raw and raw.get(k) in (None, "", [])]


def _check_resolved(raw: Mapping[str, Any]) -> None:
    # Refused here, before any backend is started for it, rather than launched without a file.
    missing = unresolved_fields(raw)
    if missing:
        raise KcppsError(
            f"{missing[0]} is not resolved: the file carries {missing[0]}_hash but no path; "
            "resolve it with POST /router/v1/site/model-assets/import"
        )


def _is_set(value: Any) -> bool:
    if isinstance(value, str):
        return bool(value.strip())
    return value not in (None, False, [], {}, 0)


def _backend_mode(value: Any, default: BackendMode) -> BackendMode:
    if value is None or value == "":
        return default
    if isinstance(value, str) and value in {m.value for m in BackendMode}:
        return BackendMode(value)
    raise KcppsError("backend_mode must be one of " + ", ".join(m.value for m in BackendMode))


def _jinja_kwargs(value: Any) -> dict[str, Any]:
    if value is None or value == "":
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except (ValueError, RecursionError):
            raise KcppsError("jinja_kwargs string is not valid JSON") from None
        if not _depth_within(value, MAX_DEPTH):
            raise KcppsError(f"jinja_kwargs nesting deeper than {MAX_DEPTH} levels")
    if not isinstance(value, dict):
        raise KcppsError("jinja_kwargs must be a JSON object or a string holding one")
    return value


def _serve_args(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise KcppsError("serve_args must be a list of strings")
    for arg in value:
        flag = arg.split("=", 1)[0].strip()
        if flag in REFUSED_SERVE_FLAGS:
            raise KcppsError(f"serve_args may not contain {flag} (the router owns it)")
    return tuple(value)


def _components(raw: Mapping[str, Any], base: Path) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for key in (*MAIN_COMPONENTS, *sorted(AUX_COMPONENTS)):
        value = raw.get(key)
        if value in (None, "", False, []):
            continue
        if isinstance(value, list) and key in LIST_COMPONENTS:
            items = [v for v in value if v is not None and not _blank(v)]
            for index, item in enumerate(items):
                found[f"{key}[{index}]"] = _component_path(key, item, base)
        elif isinstance(value, str):
            if value.strip():
                found[key] = _component_path(key, value, base)
        else:
            raise KcppsError(f"{key} must be a file path")
    return found


def _blank(value: Any) -> bool:
    return isinstance(value, str) and not value.strip()


def _component_path(key: str, value: Any, base: Path) -> Path:
    if not isinstance(value, str):
        raise KcppsError(f"{key} must list file paths")
    text = value.strip()
    if "\x00" in text or len(text) > MAX_PATH_CHARS:
        raise KcppsError(f"{key} is not a usable file path")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise KcppsError(f"{key} is not a usable file path") from None
    if URL_PATTERN.match(text):
        raise KcppsError(f"{key} is a URL; download the file and give its path")
    if key == "model_param" and text.lower().endswith((".kcpps", ".kcppt")):
        raise KcppsError("model_param names another launch config; point it at a model file")
    return Path(os.path.normpath(base / text))


def _check_roots(components: Mapping[str, Path], roots: Sequence[Path]) -> None:
    if not roots:
        return
    real_roots = [Path(os.path.realpath(r)) for r in roots]
    for key, path in components.items():
        real = Path(os.path.realpath(path))
        if not any(real.is_relative_to(root) for root in real_roots):
            raise KcppsError(f"{key} points outside the allowed model folders (models.file_roots)")


def _lanes(
    components: Mapping[str, Path], mode: BackendMode
) -> tuple[frozenset[Lane], tuple[str, ...]]:
    lanes: set[Lane] = set()
    warnings: list[str] = []
    for key, lane in MAIN_COMPONENTS.items():
        if key not in components:
            continue
        if key == "ttsmodel" and mode is BackendMode.LLAMA_SDCPP:  # valid under kobold and vllm
            warnings.append("ttsmodel is ignored: llama_sdcpp mode has no text-to-speech")
        elif family_for(mode, lane) is None:
            warnings.append(
                f"{key} is ignored: {mode.value} mode does not serve the {lane.value} lane"
            )
        else:
            lanes.add(lane)
    return frozenset(lanes), tuple(warnings)


def _image_id(config_id: str, components: Mapping[str, Path]) -> str:
    source = components.get("sdmodel") or components["sddiffusionmodel"]
    # Split on both separators: configs written on Windows carry `C:\models\x.safetensors`.
    name = re.split(r"[\\/]", str(source))[-1]
    stem = name.rsplit(".", 1)[0] if "." in name[1:] else name
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", stem).strip("-") or "image"
    return f"{config_id}-{stem}"[:128]
