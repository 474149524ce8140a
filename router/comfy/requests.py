"""Backend request bodies for a video job, and the /history record a ComfyUI client reads.

`load(name)` hands back the bytes and kind ("image" | "audio") of an upload the router kept;
it raises `BadRequest` for a name the router never stored. Everything is checked before the
job is accepted: media kinds, the per-workflow media total, and each backend's limits.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

from router.comfy.media import MediaRefs
from router.comfy.workflow import VideoPlan
from router.errors import BadRequest, PayloadTooLarge

Loader = Callable[[str], tuple[bytes, str]]

KOBOLD_MAX_FRAMES = 480  # KoboldCpp's own frame cap
KOBOLD_MAX_REFERENCE_IMAGES = 4  # KoboldCpp's extra_images_max
KOBOLD_VIDEO_OUTPUT_TYPE = 1  # MJPG-AVI: the one KoboldCpp container that carries audio
WORKFLOW_MEDIA_CAP = 64 * 1024 * 1024

# ComfyUI sampler / scheduler names -> stable-diffusion.cpp names. A name missing here is
# left out of the request so the backend's default applies instead of an error.
SDCPP_SAMPLERS = {
    "euler": "euler",
    "euler_ancestral": "euler_a",
    "heun": "heun",
    "dpm_2": "dpm2",
    "dpmpp_2s_ancestral": "dpm++2s_a",
    "dpmpp_2m": "dpm++2m",
    "ipndm": "ipndm",
    "ipndm_v": "ipndm_v",
    "lcm": "lcm",
    "ddim": "ddim_trailing",
    "res_multistep": "res_multistep",
    "tcd": "tcd",
}
SDCPP_SCHEDULERS = {
    "normal": "discrete",
    "karras": "karras",
    "exponential": "exponential",
    "sgm_uniform": "sgm_uniform",
    "simple": "simple",
    "kl_optimal": "kl_optimal",
}
# KoboldCpp's sdapi takes A1111 display names.
KOBOLD_SAMPLERS = {
    "euler": "Euler",
    "euler_ancestral": "Euler a",
    "heun": "Heun",
    "dpm_2": "DPM2",
    "dpmpp_2s_ancestral": "DPM++ 2S a",
    "dpmpp_2m": "DPM++ 2M",
    "lcm": "LCM",
    "ddim": "DDIM",
    "tcd": "TCD",
}
_AUDIO_MAGIC = (
    (b"RIFF", "wav"),
    (b"fLaC", "flac"),
    (b"OggS", "ogg"),
    (b"ID3", "mpeg"),
    (b"\xff\xfb", "mpeg"),
    (b"\xff\xf3", "mpeg"),
    (b"\xff\xf2", "mpeg"),
    (b"\xff\xf1", "aac"),
    (b"\xff\xf9", "aac"),
)
_AUDIO_BY_EXT = {"wav": "wav", "mp3": "mpeg", "flac": "flac", "ogg": "ogg", "opus": "ogg"}
_AUDIO_BY_EXT |= {"m4a": "mp4", "aac": "aac"}


class MediaSet:
    """Loads each named upload once, checks its kind, and keeps the workflow's running total."""

    def __init__(self, load: Loader, cap: int) -> None:
        self._load, self._cap = load, cap
        self._seen: dict[str, bytes] = {}
        self.total = 0

    def get(self, name: str, want: str) -> bytes:
        data, kind = self._load(name)
        if kind != want:
            raise BadRequest(f"upload {name!r} is {kind}, but the workflow loads it as {want}")
        if name not in self._seen:
            self._seen[name] = data
            self.total += len(data)
            if self.total > self._cap:
                raise PayloadTooLarge(
                    f"media referenced by one workflow exceeds {self._cap // (1024 * 1024)} MiB",
                    code="workflow_media_too_large",
                )
        return data


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def audio_subtype(name: str, data: bytes) -> str:
    """The data-URL subtype of an audio upload: by content first, then by extension."""
    for magic, subtype in _AUDIO_MAGIC:
        if data.startswith(magic):
            return subtype
    if data[4:8] == b"ftyp":
        return "mp4"
    ext = name.rsplit(".", 1)[-1].lower() if "." in name else ""
    return _AUDIO_BY_EXT.get(ext, "wav")


def _common(plan: VideoPlan) -> dict[str, Any]:
    return {
        "prompt": plan.prompt,
        "negative_prompt": plan.negative_prompt,
        "width": plan.width,
        "height": plan.height,
        "seed": plan.seed,
    }


def kobold_txt2img(
    plan: VideoPlan, media: MediaRefs, load: Loader, *, max_media_bytes: int = WORKFLOW_MEDIA_CAP
) -> dict[str, Any]:
    """One KoboldCpp /sdapi/v1/txt2img body that renders the whole clip."""
    if len(media.reference_images) > KOBOLD_MAX_REFERENCE_IMAGES:
        raise BadRequest(
            f"KoboldCpp takes at most {KOBOLD_MAX_REFERENCE_IMAGES} reference images; "
            f"this workflow loads {len(media.reference_images)}",
            code="too_many_reference_images",
        )
    files = MediaSet(load, max_media_bytes)
    body = _common(plan) | {
        "steps": plan.steps,
        "cfg_scale": plan.cfg,
        "frames": min(plan.frames, KOBOLD_MAX_FRAMES),
        "fps": max(1, round(plan.fps)),
        "video_output_type": KOBOLD_VIDEO_OUTPUT_TYPE,
    }
    if plan.sampler_name in KOBOLD_SAMPLERS:
        body["sampler_name"] = KOBOLD_SAMPLERS[plan.sampler_name]
    if plan.scheduler in SDCPP_SCHEDULERS:
        body["scheduler"] = SDCPP_SCHEDULERS[plan.scheduler]
    extra = [_b64(files.get(name, "image")) for name in media.reference_images]
    for name in media.reference_audio:
        data = files.get(name, "audio")
        extra.append(f"data:audio/{audio_subtype(name, data)};base64,{_b64(data)}")
    if extra:
        body["extra_images"] = extra
    if media.start_image:
        body["video_start_frame"] = _b64(files.get(media.start_image, "image"))
    if media.end_image:
        body["video_end_frame"] = _b64(files.get(media.end_image, "image"))
    if media.loras:
        body["lora"] = [dict(lora) for lora in media.loras]
    return body


def _sample_params(plan: VideoPlan) -> dict[str, Any]:
    params: dict[str, Any] = {"sample_steps": plan.steps, "guidance": {"txt_cfg": plan.cfg}}
    if plan.sampler_name in SDCPP_SAMPLERS:
        params["sample_method"] = SDCPP_SAMPLERS[plan.sampler_name]
    if plan.scheduler in SDCPP_SCHEDULERS:
        params["scheduler"] = SDCPP_SCHEDULERS[plan.scheduler]
    return params


def sdcpp_vid_gen(
    plan: VideoPlan, media: MediaRefs, load: Loader, *, max_media_bytes: int = WORKFLOW_MEDIA_CAP
) -> dict[str, Any]:
    """One stable-diffusion.cpp /sdcpp/v1/vid_gen job body."""
    if media.reference_audio:
        raise BadRequest(
            "sd-server has no audio input; audio-driven workflows need backend_mode: kobold",
            code="unsupported_media",
        )
    files = MediaSet(load, max_media_bytes)
    body = _common(plan) | {
        "strength": plan.denoise,
        "video_frames": plan.frames,
        "fps": max(1, round(plan.fps)),
        "sample_params": _sample_params(plan),
    }
    if media.start_image:
        body["init_image"] = _b64(files.get(media.start_image, "image"))
    if media.end_image:
        body["end_image"] = _b64(files.get(media.end_image, "image"))
    if media.reference_images:
        body["ref_images"] = [_b64(files.get(n, "image")) for n in media.reference_images]
    if media.loras:
        body["lora"] = [dict(lora) for lora in media.loras]
    return body


def history_entry(
    prompt_id: str,
    filename: str,
    subfolder: str = "",
    type_: str = "output",
    *,
    node_id: str = "9",
    frame_rate: float | None = None,
) -> dict[str, Any]:
    """The /history/{prompt_id} answer for a finished job: one `gifs` output, an MP4.

    `node_id` should be the workflow's own video sink, since clients look outputs up by it.
    """
    if not filename.lower().endswith(".mp4"):
        raise ValueError("a video job's history output must be an .mp4 file")
    gif: dict[str, Any] = {
        "filename": filename,
        "subfolder": subfolder,
        "type": type_,
        "format": "video/h264-mp4",
    }
    if frame_rate is not None:
        gif["frame_rate"] = frame_rate
    return {
        prompt_id: {
            "prompt": [0, prompt_id, {}, {}, [node_id]],
            "outputs": {node_id: {"gifs": [gif]}},
            "status": {"status_str": "success", "completed": True, "messages": []},
            "meta": {
                node_id: {
                    "node_id": node_id,
                    "display_node": node_id,
                    "parent_node": None,
                    "real_node_id": node_id,
                }
            },
        }
    }
