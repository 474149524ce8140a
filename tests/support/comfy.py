"""ComfyUI requests as a client builds them (tests/comfy, tests/forwarding): workflows,
a hand-built multipart upload, and waiting for a job through /history."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx


def n(class_type: str, **inputs: Any) -> dict[str, Any]:
    return {"class_type": class_type, "inputs": inputs}


def video_workflow(image: str = "cat.png", audio: str | None = None) -> dict[str, Any]:
    """LTXV image-to-video, 9 frames at 8 fps, with an optional reference audio loader."""
    wf = {
        "6": n("CLIPTextEncode", text="a cat walks", clip=["38", 0]),
        "7": n("CLIPTextEncode", text="blurry", clip=["38", 0]),
        "38": n("CLIPLoader", clip_name="t5.safetensors", type="ltxv"),
        "44": n("CheckpointLoaderSimple", ckpt_name="ltx.safetensors"),
        "78": n("LoadImage", image=f"{image} [input]"),
        "77": n(
            "LTXVImgToVideo",
            positive=["6", 0],
            negative=["7", 0],
            vae=["44", 2],
            image=["78", 0],
            width=64,
            height=48,
            length=9,
        ),
        "72": n(
            "KSampler",
            model=["44", 0],
            seed=7,
            steps=2,
            cfg=3,
            positive=["77", 0],
            negative=["77", 1],
            latent_image=["77", 2],
        ),
        "8": n("VAEDecode", samples=["72", 0], vae=["44", 2]),
        "41": n("VHS_VideoCombine", images=["8", 0], frame_rate=8),
    }
    if audio:
        wf["90"] = n("LoadAudio", audio=audio)
        wf["41"]["inputs"]["audio"] = ["90", 0]
    return wf


def still_workflow() -> dict[str, Any]:
    return {
        "4": n("CheckpointLoaderSimple", ckpt_name="sdxl.safetensors"),
        "5": n("EmptyLatentImage", width=64, height=64, batch_size=1),
        "6": n("CLIPTextEncode", text="a cat", clip=["4", 1]),
        "7": n("CLIPTextEncode", text="", clip=["4", 1]),
        "3": n(
            "KSampler",
            model=["4", 0],
            seed=1,
            steps=2,
            cfg=7,
            positive=["6", 0],
            negative=["7", 0],
            latent_image=["5", 0],
        ),
        "8": n("VAEDecode", samples=["3", 0], vae=["4", 2]),
        "9": n("SaveImage", images=["8", 0], filename_prefix="x"),
    }


def form(filename: str, data: bytes, ctype: str = "image/png", **fields: str) -> dict[str, Any]:
    """A hand-built multipart body, so names reach the router byte for byte."""
    boundary = "tensorrouterboundary"
    parts = [
        f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode()
        for k, v in fields.items()
    ]
    quoted = filename.replace("\\", "\\\\").replace('"', '\\"')
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="image"; filename="{quoted}"\r\n'
        f"Content-Type: {ctype}\r\n\r\n"
    )
    body = b"".join(parts) + head.encode() + data + f"\r\n--{boundary}--\r\n".encode()
    headers = {"Content-Type": f"multipart/form-data; boundary={boundary}"}
    return {"content": body, "headers": headers}


async def wait_done(client: httpx.AsyncClient, prompt_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        r = await client.get(f"/history/{prompt_id}")
        assert r.status_code == 200, r.text
        if r.json():
            return r.json()[prompt_id]  # type: ignore[no-any-return]
        await asyncio.sleep(0.1)
    raise AssertionError("the video job did not finish")
