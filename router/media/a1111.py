"""A1111 (`/sdapi/v1/...`) answers the router gives itself where the image backend has none.

Pure: no I/O. The handlers in router/api/images.py decide when to use them (docs/media.md):
- `progress_record`: A1111's `GET /sdapi/v1/progress` built from what the router knows (a
  generation running or not, how many wait), for backends without a progress route (sd-server).
- `INTERRUPT_ANSWER` / `SKIP_ANSWER`: A1111's own answers (`{}` and `null`); `NO_SCRIPTS`
  for `GET /sdapi/v1/scripts` (clients such as webuiapi ask it when they start).
- `fix_seed`: a random seed chosen before sending, as A1111 does, so `info` can name it.
- `info_text`: the `info` JSON string of a txt2img/img2img answer, from the backend's own
  (sd-server's newer builds send one) or from the request, with the public model ID.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

SEED_MAX = 2**32 - 1  # A1111's seeds are 32-bit
INTERRUPT_ANSWER: dict[str, Any] = {}
SKIP_ANSWER = None
NO_SCRIPTS: dict[str, list[str]] = {"txt2img": [], "img2img": []}  # sd-server runs no scripts


@dataclass(frozen=True)
class LaneActivity:
    """What the image lane is doing: generations running on its runtime and waiting for it."""

    running: int
    waiting: int
    started: float | None  # wall-clock start of the oldest running generation
    model: str | None


def progress_record(activity: LaneActivity) -> dict[str, Any]:
    """A1111's progress record. The router cannot see sampling steps inside sd-server, so
    `progress` stays 0 while work runs; `job_count` says work is pending, which is what
    clients such as webuiapi's `util_wait_for_ready` poll for."""
    jobs = activity.running + activity.waiting
    busy = activity.running > 0
    stamp = time.strftime("%Y%m%d%H%M%S", time.localtime(activity.started)) if busy else "0"
    textinfo = None
    if jobs:
        textinfo = f"{activity.model or 'image model'}: {activity.running} running, {activity.waiting} waiting"
    return {
        "progress": 0.0,
        "eta_relative": 0.0,
        "state": {
            "skipped": False,
            "interrupted": False,
            "job": "txt2img" if busy else "",
            "job_count": jobs,
            "job_timestamp": stamp,
            "job_no": 0,
            "sampling_step": 0,
            "sampling_steps": 0,
        },
        "current_image": None,
        "textinfo": textinfo,
    }


def fix_seed(body: bytes, seed: int) -> tuple[bytes, dict[str, Any] | None]:
    """The body with `seed` in place of a missing or negative seed, and the parsed request;
    the body unchanged (and None) when it is not a JSON object."""
    try:
        request = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return body, None
    if not isinstance(request, dict):
        return body, None
    current = request.get("seed")
    if isinstance(current, int) and not isinstance(current, bool) and current >= 0:
        return body, request
    if current is not None and not isinstance(current, int | float):
        return body, request  # the backend refuses a bad seed in its own words
    request["seed"] = seed % (SEED_MAX + 1)
    return json.dumps(request, ensure_ascii=False).encode(), request


_SETTINGS = (
    ("negative_prompt", ""), ("width", 512), ("height", 512), ("steps", None),
    ("cfg_scale", None), ("sampler_name", None), ("scheduler", None), ("batch_size", 1),
    ("clip_skip", None), ("denoising_strength", None),
)  # fmt: skip


def info_text(request: dict[str, Any], backend_info: object, public_id: str, img2img: bool) -> str:
    """The `info` string: the backend's JSON when it sent one, else built from the request;
    either way with the seed that was used and the public model ID (never a file name)."""
    info: dict[str, Any] = {}
    if isinstance(backend_info, str) and backend_info.strip():
        try:
            parsed = json.loads(backend_info)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            info = parsed
    prompt = request.get("prompt", "")
    info.setdefault("prompt", prompt)
    for key, default in _SETTINGS:
        if key == "denoising_strength" and not img2img:
            continue
        if key not in info and (request.get(key, default) is not None):
            info[key] = request.get(key, default)
    seed = request.get("seed")
    if isinstance(seed, int) and seed >= 0 and not _valid_seed(info.get("seed")):
        info["seed"] = seed
    count = _count(info.get("batch_size"))
    base = info.get("seed")
    if isinstance(base, int) and _valid_seed(base) and not info.get("all_seeds"):
        info["all_seeds"] = [base + i for i in range(count)]
    if not info.get("all_prompts"):
        info["all_prompts"] = [prompt] * count
    if not info.get("all_negative_prompts"):
        info["all_negative_prompts"] = [info.get("negative_prompt", "")] * count
    info["sd_model_name"] = public_id
    info.setdefault("index_of_first_image", 0)
    info.setdefault("infotexts", [])
    return json.dumps(info, ensure_ascii=False)


def _valid_seed(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _count(value: object) -> int:
    return value if isinstance(value, int) and 1 <= value <= 64 else 1


def generation_answer(body: bytes, request: dict[str, Any], public_id: str, img2img: bool) -> bytes:
    """A txt2img/img2img answer with its `info` replaced; other bodies unchanged."""
    try:
        answer = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return body
    if not isinstance(answer, dict) or "images" not in answer:
        return body
    answer["info"] = info_text(request, answer.get("info"), public_id, img2img)
    return json.dumps(answer, ensure_ascii=False).encode()
