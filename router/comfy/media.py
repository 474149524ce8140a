"""Which uploads a video workflow uses, in which role, and which upload names are acceptable.

The router never forwards a video workflow, so it reads the media out of the graph itself:
start and end frames, reference images, reference audio and LoRAs. Only nodes the workflow
actually uses count (ancestors of the sampler or of a video sink), the way ComfyUI only runs
nodes an output depends on. Pure functions; every refusal is a `BadRequest` (HTTP 400).
"""

from __future__ import annotations

import re
import unicodedata
from collections import deque
from dataclasses import dataclass
from typing import Any

from router.comfy.workflow import Graph, VideoPlan, parse_graph
from router.errors import BadRequest

MAX_NAME_BYTES = 255
AUDIO_EXTENSIONS = frozenset({".wav", ".mp3", ".flac", ".ogg", ".opus", ".m4a", ".aac"})
# Shell and Windows-reserved characters: ffmpeg is run without a shell, but a plain name never
# needs them and refusing them keeps every later use (argv, logs, Content-Disposition) safe.
_REFUSED_CHARS = frozenset("/\\:\"'`$;|&<>*?")
_ANNOTATION = re.compile(r" \[(input|output|temp)\]$")  # ComfyUI's "name.png [input]" form
_START_SLOT = re.compile(
    r"(start|first|init|begin)_?(image|frame|img)s?|(image|frame)_?(start|first)"
)
_END_SLOT = re.compile(r"(end|last|final)_?(image|frame|img)s?|(image|frame)_?(end|last)")
_I2V_NODE = re.compile(r"imgtovideo|imagetovideo|img2vid|i2v")
# Inputs through which an image flows on unchanged in kind (ImageScale, ImageResize+, crops).
_PASS_KEYS = frozenset({"image", "images", "pixels", "input_image"})
_AUDIO_FILE_KEYS = ("audio", "audio_file", "file", "filename")


@dataclass(frozen=True)
class MediaRefs:
    start_image: str | None
    end_image: str | None
    reference_images: tuple[str, ...]
    reference_audio: tuple[str, ...]
    loras: tuple[dict[str, Any], ...]  # {"path": file name, "multiplier": strength_model}


def check_upload_name(name: Any) -> str:
    """Return `name` when it is a plain file name; otherwise refuse it (400)."""
    if not isinstance(name, str) or not name.strip():
        raise BadRequest("upload file name is empty")
    if len(name.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
        raise BadRequest("upload file name is too long")
    if ".." in name:
        raise BadRequest("upload file name may not contain '..'")
    if any(ch in _REFUSED_CHARS for ch in name):
        raise BadRequest(
            "upload file name must be a plain name (no paths, drives or shell characters)"
        )
    if any(unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp") for ch in name):
        raise BadRequest("upload file name contains control characters")
    if name[0] in "-. " or name[-1] in ". ":
        raise BadRequest("upload file name may not start with '-', '.' or a space")
    return name


def is_audio_upload(filename: str | None, content_type: str | None) -> bool:
    """ComfyUI frontends upload audio through /upload/image; tell it apart from images."""
    if content_type and content_type.split(";")[0].strip().lower().startswith("audio/"):
        return True
    if not filename or "." not in filename:
        return False
    return "." + filename.rsplit(".", 1)[1].lower() in AUDIO_EXTENSIONS


def _stored_name(value: Any, node_id: str) -> str:
    if not isinstance(value, str):
        raise BadRequest(f"workflow node {node_id!r} does not name a file")
    return check_upload_name(_ANNOTATION.sub("", value))


def _live_nodes(graph: Graph, roots: list[str]) -> set[str]:
    """The roots and everything they depend on."""
    live = set(roots)
    queue = deque(roots)
    while queue:
        nid = queue.popleft()
        for value in graph.nodes[nid].inputs.values():
            if isinstance(value, tuple) and value[0] not in live:
                live.add(value[0])
                queue.append(value[0])
    return live


def _slot_role(graph: Graph, consumer: str, key: str) -> str | None:
    k = key.lower()
    if _START_SLOT.fullmatch(k):
        return "start"
    if _END_SLOT.fullmatch(k):
        return "end"
    name = re.sub(r"[^a-z0-9]", "", graph.nodes[consumer].class_type.lower())
    if k in ("image", "images") and _I2V_NODE.search(name):
        return "start"
    return None


def frame_role(graph: Graph, loader: str) -> str | None:
    """ "start" or "end" when the loaded image reaches a frame slot, maybe through resizes."""
    seen = {loader}
    queue = deque([loader])
    while queue:
        nid = queue.popleft()
        for consumer, key in graph.consumers[nid]:
            role = _slot_role(graph, consumer, key)
            if role:
                return role
            if key.lower() in _PASS_KEYS and consumer not in seen:
                seen.add(consumer)
                queue.append(consumer)
    return None


def _is_image_loader(graph: Graph, nid: str) -> bool:
    node = graph.nodes[nid]
    return (
        "LoadImage" in node.class_type
        and "Mask" not in node.class_type
        and isinstance(node.inputs.get("image"), str)
    )


def _audio_file(graph: Graph, nid: str) -> str | None:
    node = graph.nodes[nid]
    if "LoadAudio" not in node.class_type:
        return None
    for key in _AUDIO_FILE_KEYS:
        if key in node.inputs:
            return _stored_name(node.inputs[key], nid)
    raise BadRequest(f"workflow node {nid!r} ({node.class_type}) does not name an audio file")


def lora_file_name(value: Any) -> str:
    """The bare file name of a LoRA; the backend resolves it in its own LoRA directory."""
    if not isinstance(value, str) or not value.strip():
        raise BadRequest("LoRA name is empty")
    if value.startswith(("/", "\\")) or re.match(r"[A-Za-z]:", value):
        raise BadRequest("LoRA name may not be an absolute path")
    parts = re.split(r"[\\/]", value)
    if ".." in parts:
        raise BadRequest("LoRA name may not contain '..'")
    base = parts[-1]
    if base in ("", ".") or any(unicodedata.category(ch) in ("Cc", "Cf") for ch in base):
        raise BadRequest("LoRA name is not a plain file name")
    return base


def _lora(graph: Graph, nid: str) -> dict[str, Any] | None:
    node = graph.nodes[nid]
    if not node.class_type.startswith("LoraLoader") or "lora_name" not in node.inputs:
        return None
    path = lora_file_name(node.inputs["lora_name"])
    strength = node.inputs.get("strength_model", 1.0)
    if isinstance(strength, bool) or not isinstance(strength, int | float):
        strength = 1.0
    # ComfyUI itself skips a LoRA whose model strength is zero.
    return {"path": path, "multiplier": float(strength)} if strength != 0 else None


def resolve_media(prompt: Any, plan: VideoPlan) -> MediaRefs:
    graph = parse_graph(prompt)
    live = _live_nodes(graph, [plan.sampler_id, *plan.output_ids])
    start: str | None = None
    end: str | None = None
    refs: list[str] = []
    audio: list[str] = []
    loras: list[dict[str, Any]] = []
    for nid in (n for n in graph.order if n in live):
        if _is_image_loader(graph, nid):
            name = _stored_name(graph.nodes[nid].inputs["image"], nid)
            role = frame_role(graph, nid)
            if role == "start" and start is None:
                start = name
            elif role == "end" and end is None:
                end = name
            else:
                refs.append(name)
        elif (sound := _audio_file(graph, nid)) is not None:
            audio.append(sound)
        elif (lora := _lora(graph, nid)) is not None:
            loras.append(lora)
    if start is None and refs:
        start = refs[0]  # the first reference doubles as the start frame
    return MediaRefs(start, end, tuple(refs), tuple(audio), tuple(loras))
