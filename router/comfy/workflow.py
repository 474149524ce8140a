"""Inspect a ComfyUI API-format prompt: is it a video job, and with which settings?

The prompt maps node ids to `{"class_type", "inputs"}`; an input that is `[node_id, output]`
is a link. Node class names differ per model family (and per custom-node pack), so the
sampler is found by shape (a node with both `positive` and `negative` inputs) and every
setting is looked up by input name, nearest to the sampler first. Everything here is pure;
anything malformed is a `BadRequest`, never another exception, because the input is an
untrusted request body.
"""

from __future__ import annotations

import heapq
import math
import re
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from router.errors import BadRequest

MAX_NODES = 5000  # bounds the work one request can cause; real workflows have < 300 nodes

# Output nodes that write an animation or a video container.
VIDEO_SINKS = frozenset(
    {
        "SaveAnimatedWEBP",
        "SaveAnimatedPNG",
        "SaveVideo",
        "SaveWEBM",
        "CreateVideo",
        "VHS_VideoCombine",
    }
)
FRAME_KEYS = ("length", "frames", "video_frames", "num_frames", "frame_count")
FPS_KEYS = ("frame_rate", "fps")
SEED_KEYS = ("seed", "noise_seed")
# Inputs through which conditioning flows back towards the text encoder.
_COND_KEYS = ("conditioning", "conditioning_1", "conditioning_to", "cond", "clip_conditioning")
_TEXT_KEYS = ("text", "prompt", "text_g", "t5xxl", "clip_l", "text_l")
_STRING_SOURCE_KEYS = ("value", "string", "text", "prompt")
# The family marker is searched in the class name lowered with punctuation removed.
_FAMILIES = (
    ("wan_s2v", re.compile(r"^wan.*sound")),
    ("minimax_h3", re.compile(r"minimaxh3")),
    ("ltx", re.compile(r"ltx")),
    ("wan", re.compile(r"^wan")),
    ("hunyuan_video", re.compile(r"hunyuan.*video")),
    ("svd", re.compile(r"^svd|^video(linear|triangle)cfgguidance$")),
)

DEFAULTS: dict[str, Any] = {
    "seed": 0,
    "steps": 20,
    "cfg": 8.0,  # ComfyUI's KSampler defaults
    "sampler_name": "euler",
    "scheduler": "normal",
    "denoise": 1.0,
    "width": 832,  # Wan / sd-server vid_gen defaults
    "height": 480,
    "frames": 33,
    "fps": 16.0,  # KoboldCpp's default
}


@dataclass(frozen=True)
class Node:
    id: str
    class_type: str
    inputs: Mapping[str, Any]  # links are normalised to (source_id, output_index) tuples


@dataclass(frozen=True)
class Graph:
    nodes: Mapping[str, Node]
    order: tuple[str, ...]  # node order: numeric ids numerically
    topo: tuple[str, ...]  # producers before consumers, ties in node order
    consumers: Mapping[str, tuple[tuple[str, str], ...]]  # id -> ((consumer, input name), ...)

    def source(self, node_id: str, key: str) -> str | None:
        """The node feeding `key` of `node_id`, when that input is a link."""
        value = self.nodes[node_id].inputs.get(key)
        return value[0] if isinstance(value, tuple) else None


@dataclass(frozen=True)
class VideoPlan:
    family: str  # ltx | wan | wan_s2v | hunyuan_video | minimax_h3 | svd | generic
    sampler_id: str
    output_ids: tuple[str, ...]  # the video sink nodes, for the /history entry
    prompt: str
    negative_prompt: str
    seed: int
    steps: int
    cfg: float
    sampler_name: str
    scheduler: str
    denoise: float
    width: int
    height: int
    frames: int
    fps: float


def node_sort_key(node_id: str) -> tuple[int, tuple[int, ...], str]:
    """Numeric ids (also subgraph ids like `12:3`) sort numerically, before all others."""
    parts = node_id.split(":")
    if all(p.isascii() and p.isdigit() and len(p) < 20 for p in parts):
        return (0, tuple(int(p) for p in parts), node_id)
    return (1, (), node_id)


def _is_link(value: Any) -> bool:
    return (
        isinstance(value, list)
        and len(value) == 2
        and isinstance(value[0], str | int)
        and not isinstance(value[0], bool)
        and isinstance(value[1], int)
        and not isinstance(value[1], bool)
    )


def _parse_node(node_id: Any, raw: Any) -> Node:
    if not isinstance(node_id, str) or not node_id:
        raise BadRequest("prompt node ids must be non-empty strings")
    if not isinstance(raw, dict):
        raise BadRequest(f"prompt node {node_id!r} is not an object")
    class_type = raw.get("class_type")
    if not isinstance(class_type, str) or not class_type:
        raise BadRequest(f"prompt node {node_id!r} has no class_type")
    raw_inputs = raw.get("inputs", {})
    if not isinstance(raw_inputs, dict):
        raise BadRequest(f"prompt node {node_id!r} has inputs that are not an object")
    inputs: dict[str, Any] = {}
    for key, value in raw_inputs.items():
        if _is_link(value):
            if value[1] < 0:
                raise BadRequest(f"prompt node {node_id!r} input {key!r} has a negative output")
            value = (str(value[0]), value[1])
        inputs[key] = value
    return Node(node_id, class_type, inputs)


def parse_graph(prompt: Any) -> Graph:
    """Validate the prompt's structure: objects, class types, links that resolve, no cycles."""
    if not isinstance(prompt, dict):
        raise BadRequest("prompt must be an object mapping node ids to nodes")
    if not prompt:
        raise BadRequest("prompt has no nodes")
    if len(prompt) > MAX_NODES:
        raise BadRequest(f"prompt has more than {MAX_NODES} nodes")
    nodes = {nid: _parse_node(nid, raw) for nid, raw in prompt.items()}
    consumers: dict[str, list[tuple[str, str]]] = {nid: [] for nid in nodes}
    for node in nodes.values():
        for key, value in node.inputs.items():
            if isinstance(value, tuple):
                if value[0] not in nodes:
                    raise BadRequest(
                        f"prompt node {node.id!r} input {key!r} links to missing node {value[0]!r}"
                    )
                consumers[value[0]].append((node.id, key))
    order = tuple(sorted(nodes, key=node_sort_key))
    topo = _topological(nodes, consumers, order)
    return Graph(nodes, order, topo, {k: tuple(v) for k, v in consumers.items()})


def _topological(
    nodes: Mapping[str, Node],
    consumers: Mapping[str, list[tuple[str, str]]],
    order: tuple[str, ...],
) -> tuple[str, ...]:
    # Kahn's algorithm (iterative, so deep chains cannot exhaust the stack).
    indegree = {
        nid: sum(isinstance(v, tuple) for v in n.inputs.values()) for nid, n in nodes.items()
    }
    rank = {nid: i for i, nid in enumerate(order)}
    ready = [(rank[nid], nid) for nid in order if indegree[nid] == 0]
    heapq.heapify(ready)
    out: list[str] = []
    while ready:
        _, nid = heapq.heappop(ready)
        out.append(nid)
        for consumer, _key in consumers[nid]:
            indegree[consumer] -= 1
            if indegree[consumer] == 0:
                heapq.heappush(ready, (rank[consumer], consumer))
    if len(out) != len(nodes):
        raise BadRequest("prompt links form a cycle")
    return tuple(out)


def _norm(class_type: str) -> str:
    return re.sub(r"[^a-z0-9]", "", class_type.lower())


def node_family(class_type: str) -> str | None:
    name = _norm(class_type)
    for family, pattern in _FAMILIES:
        if pattern.search(name):
            return family
    return None


def _number(value: Any) -> int | float | None:
    """A usable numeric input: finite, and no wider than ComfyUI's 64-bit seeds."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, int):
        return value if abs(value) <= 2**64 else None
    return value if math.isfinite(value) else None


def _frame_count(node: Node) -> int | None:
    keys = FRAME_KEYS + (("batch_size",) if "video" in node.class_type.lower() else ())
    for key in keys:
        value = _number(node.inputs.get(key))
        if value is not None:
            return int(value)
    return None


def _is_video_sink(class_type: str) -> bool:
    return class_type in VIDEO_SINKS or class_type.startswith("SaveAnimated")


def _detect_family(graph: Graph) -> str | None:
    """The family that makes this a video workflow, "generic", or None for a still image."""
    family: str | None = None
    video = False
    for nid in graph.order:
        node = graph.nodes[nid]
        frames = _frame_count(node)
        video = video or _is_video_sink(node.class_type) or (frames or 0) > 1
        found = node_family(node.class_type)
        # An empty latent allocator says nothing by its name (Wan and Hunyuan text-to-image
        # use a one-frame "video" latent); its frame count decides instead.
        if found and not node.class_type.startswith("Empty"):
            video = True
        family = family or found
    if not video:
        return None
    return family or "generic"


def _is_guider(node: Node) -> bool:
    return "guider" in node.class_type.lower() and "conditioning" in node.inputs


def find_sampler(graph: Graph) -> str:
    """The node with positive and negative inputs that is not itself conditioning for another.

    Image-to-video nodes (WanImageToVideo, LTXVImgToVideo...) take positive and negative too,
    but their outputs feed the sampler's. Of several samplers (Wan2.2 high/low noise), the
    most upstream one holds the seed. Guidance-distilled flows (HunyuanVideo's BasicGuider)
    have no negative anywhere; their guider stands in for the sampler.
    """
    nodes = graph.nodes
    cands = [n for n in graph.topo if {"positive", "negative"} <= nodes[n].inputs.keys()]
    if not cands:
        cands = [n for n in graph.topo if "positive" in nodes[n].inputs or _is_guider(nodes[n])]
    if not cands:
        raise BadRequest("video workflow has no sampler (a node with positive and negative inputs)")
    feeding = {
        src
        for nid in cands
        for key in ("positive", "negative", "conditioning")
        if (src := graph.source(nid, key)) in cands
    }
    samplers = [n for n in cands if n not in feeding]
    return (samplers or cands)[0]


def _near_first(graph: Graph, start: str) -> list[str]:
    """`start`, its ancestors by link distance, then every other node in node order."""
    seen = {start}
    out = [start]
    queue = deque([start])
    while queue:
        nid = queue.popleft()
        node = graph.nodes[nid]
        for key in sorted(node.inputs):
            src = graph.source(nid, key)
            if src is not None and src not in seen:
                seen.add(src)
                out.append(src)
                queue.append(src)
    out.extend(n for n in graph.order if n not in seen)
    return out


def _lookup(graph: Graph, order: Iterable[str], keys: tuple[str, ...], kind: type) -> Any:
    for nid in order:
        inputs = graph.nodes[nid].inputs
        for key in keys:
            value = inputs.get(key)
            if kind is str and isinstance(value, str) and value:
                return value
            if kind is not str and _number(value) is not None:
                return value
    return None


def _string_at(graph: Graph, value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, tuple):  # a primitive/string node feeding the text input
        src = graph.nodes[value[0]].inputs
        for key in _STRING_SOURCE_KEYS:
            if isinstance(src.get(key), str):
                return str(src[key])
    return None


def conditioning_text(graph: Graph, sampler_id: str, side: str) -> str:
    """Follow the sampler's `side` (positive/negative) link back to the prompt text."""
    nid = graph.source(sampler_id, side)
    if nid is None and side == "positive":
        nid = graph.source(sampler_id, "conditioning")  # a guider's single conditioning
    seen: set[str] = set()
    while nid is not None and nid not in seen:
        seen.add(nid)
        node = graph.nodes[nid]
        if "zeroout" in _norm(node.class_type):
            return ""  # a zeroed conditioning is an empty prompt, not its input's text
        for key in _TEXT_KEYS:
            text = _string_at(graph, node.inputs.get(key))
            if text is not None:
                return text
        nxt = graph.source(nid, side)
        for key in _COND_KEYS:
            nxt = nxt or graph.source(nid, key)
        nid = nxt
    return ""


def _bounded(name: str, value: float, low: float, high: float) -> float:
    if not low <= value <= high:
        raise BadRequest(f"workflow {name} {value} is outside {low:g}..{high:g}")
    return value


def _settings(graph: Graph, sampler_id: str, sinks: tuple[str, ...]) -> dict[str, Any]:
    near = _near_first(graph, sampler_id)
    got: dict[str, Any] = {
        "seed": _lookup(graph, near, SEED_KEYS, int),
        "steps": _lookup(graph, near, ("steps",), int),
        "cfg": _lookup(graph, near, ("cfg", "cfg_scale"), float),
        "sampler_name": _lookup(graph, near, ("sampler_name",), str),
        "scheduler": _lookup(graph, near, ("scheduler",), str),
        "denoise": _lookup(graph, [sampler_id], ("denoise",), float),
        "width": _lookup(graph, near, ("width",), int),
        "height": _lookup(graph, near, ("height",), int),
        "fps": _lookup(graph, list(sinks) + near, FPS_KEYS, float),
    }
    frames = [f for nid in near if (f := _frame_count(graph.nodes[nid])) is not None]
    got["frames"] = frames[0] if frames else None
    return {k: DEFAULTS[k] if v is None else v for k, v in got.items()}


def _plan(graph: Graph, family: str) -> VideoPlan:
    sampler = find_sampler(graph)
    sinks = tuple(n for n in graph.order if _is_video_sink(graph.nodes[n].class_type))
    s = _settings(graph, sampler, sinks)
    fps = float(s["fps"]) if 0 < s["fps"] <= 240 else DEFAULTS["fps"]
    return VideoPlan(
        family=family,
        sampler_id=sampler,
        output_ids=sinks,
        prompt=conditioning_text(graph, sampler, "positive"),
        negative_prompt=conditioning_text(graph, sampler, "negative"),
        seed=int(s["seed"]) % 2**63 if s["seed"] >= 0 else -1,
        steps=int(_bounded("steps", s["steps"], 1, 10_000)),
        cfg=float(_bounded("cfg", s["cfg"], 0, 1_000)),
        sampler_name=s["sampler_name"],
        scheduler=s["scheduler"],
        denoise=float(_bounded("denoise", s["denoise"], 0, 1)),
        width=int(_bounded("width", s["width"], 16, 16_384)),
        height=int(_bounded("height", s["height"], 16, 16_384)),
        frames=int(_bounded("frame count", s["frames"], 1, 100_000)),
        fps=fps,
    )


def inspect_workflow(prompt: Any) -> VideoPlan | None:
    """A `VideoPlan` for a video workflow, None for anything else (forwarded unchanged)."""
    graph = parse_graph(prompt)
    family = _detect_family(graph)
    return None if family is None else _plan(graph, family)
