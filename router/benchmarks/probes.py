"""One measured request per section and iteration, sent to a leased runtime.

The runner leases the runtime through `RuntimeManager.ensure()` (so a probe queues, swaps and
batches like any client request) and calls a probe with the lease; the probe speaks the
backend's own API on the lease's loopback URL, through the benchmark service's own backend
client (runner.py says why). Each workload is small and fixed, so runs of one model compare
with each other. The parsing of what comes
back is pure (`llm_sample`, `chunk_fields`) and unit-tested.
"""

from __future__ import annotations

import io
import json
import math
import struct
import time
import wave
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from router.backend_client import UNBOUNDED, BackendClient, Reply
from router.benchmarks.model import Measured, Sample
from router.config import ModelConfig
from router.runtime import Lease

PROMPT = "Write one short sentence about the sea."
MAX_TOKENS = 32
EMBED_INPUTS = ["The quick brown fox jumps over the lazy dog.", "Benchmarks measure speed."]
IMAGE_BODY = {"prompt": "a red apple on a table", "steps": 4, "width": 256, "height": 256}
SPEECH_TEXT = "This is a short benchmark sentence."
MUSIC_BODY = {"prompt": "calm piano", "duration": 5}
AUDIO_SECONDS = 1.0
ERROR_SNIPPET = 200
# The run's timeout_seconds bounds every probe (runner.py), so each call is UNBOUNDED: the
# session's default would cut a slow image or load at five minutes and be mistaken for it.


class ProbeFailed(Exception):
    """The backend answered, but not with what the section measures."""


Probe = Callable[[BackendClient, Lease, ModelConfig], Awaitable[Sample]]


def _ms(since: float) -> float:
    return (time.monotonic() - since) * 1000.0


def _model(lease: Lease, config: ModelConfig) -> str:
    return lease.runtime.local_model_id or config.id


async def _timed_json(client: BackendClient, url: str, **send: Any) -> tuple[Any, float]:
    """POST, the JSON answer and how long the exchange took (ms)."""
    started = time.monotonic()
    reply = _answered(await client.fetch("POST", url, deadline=UNBOUNDED, **send))
    try:
        return json.loads(reply.body), _ms(started)
    except ValueError:
        raise ProbeFailed(f"the backend's answer is not JSON: {_snippet(reply.body)}") from None


def _answered(reply: Reply, *, empty_ok: bool = True) -> Reply:
    if reply.status != 200 or not (empty_ok or reply.body):
        raise ProbeFailed(f"the backend answered {reply.status}: {_snippet(reply.body)}")
    return reply


def _snippet(raw: bytes) -> str:
    return raw[:ERROR_SNIPPET].decode("utf-8", "replace")


# ---- llm ---------------------------------------------------------------------------------


@dataclass
class Stream:
    """What a streamed chat completion told, as it arrived."""

    first_ms: float | None = None
    chunks: int = 0  # chunks carrying generated text
    usage: Mapping[str, Any] = field(default_factory=dict)
    timings: Mapping[str, Any] = field(default_factory=dict)


def chunk_fields(stream: Stream, event: Mapping[str, Any], at_ms: float) -> None:
    """Fold one `data:` object of a chat completion stream into `stream`."""
    for choice in event.get("choices") or ():
        delta = (choice.get("delta") or {}) if isinstance(choice, dict) else {}
        text = delta.get("content") or delta.get("reasoning_content") or ""
        if text:
            stream.chunks += 1
            if stream.first_ms is None:
                stream.first_ms = at_ms
    if isinstance(event.get("usage"), dict):
        stream.usage = event["usage"]
    if isinstance(event.get("timings"), dict):  # llama-server's own, in its last chunk
        stream.timings = event["timings"]


def llm_sample(stream: Stream, total_ms: float) -> Sample:
    """Tokens per second from the backend's own timings when it gives them (llama-server),
    else from its usage counts over the times the router saw (first chunk, last chunk)."""
    if stream.first_ms is None:
        raise ProbeFailed("the backend streamed no generated text")
    sample: Sample = {
        "request_ms": Measured(total_ms, "ms"),
        "first_completion_ms": Measured(stream.first_ms, "ms"),
    }
    prompt = _number(stream.usage.get("prompt_tokens")) or _number(stream.timings.get("prompt_n"))
    completion = _number(stream.usage.get("completion_tokens"))
    completion = completion or _number(stream.timings.get("predicted_n")) or float(stream.chunks)
    sample["completion_tokens"] = Measured(completion, "tokens")
    if prompt is not None:
        sample["prompt_tokens"] = Measured(prompt, "tokens")
    decode = _number(stream.timings.get("predicted_per_second"))
    if decode is None:
        generating_s = (total_ms - stream.first_ms) / 1000.0
        decode = (completion - 1) / generating_s if completion > 1 and generating_s > 0 else None
        decode = decode or completion / (total_ms / 1000.0)
    sample["tokens_per_second"] = Measured(decode, "tokens/s")
    prefill = _number(stream.timings.get("prompt_per_second"))
    if prefill is None and prompt is not None and stream.first_ms > 0:
        prefill = prompt / (stream.first_ms / 1000.0)
    if prefill is not None:
        sample["prompt_tokens_per_second"] = Measured(prefill, "tokens/s")
    return sample


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) and value >= 0 else None


async def llm(client: BackendClient, lease: Lease, config: ModelConfig) -> Sample:
    body = {
        "model": _model(lease, config),
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": MAX_TOKENS,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    stream, started = Stream(), time.monotonic()
    async with client.stream(
        "POST", lease.base_url + "/v1/chat/completions", json=body, deadline=UNBOUNDED
    ) as resp:
        if resp.status != 200:
            raise ProbeFailed(f"the backend answered {resp.status}: {_snippet(await resp.read())}")
        async for line in resp.content:
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                break
            try:
                event = json.loads(data)
            except ValueError:
                continue
            if isinstance(event, dict):
                chunk_fields(stream, event, _ms(started))
    return llm_sample(stream, _ms(started))


# ---- embed, image, voice, music --------------------------------------------------------


async def embed(client: BackendClient, lease: Lease, config: ModelConfig) -> Sample:
    body = {"model": _model(lease, config), "input": EMBED_INPUTS}
    answer, took = await _timed_json(client, lease.base_url + "/v1/embeddings", json=body)
    data = answer.get("data") if isinstance(answer, dict) else None
    if not isinstance(data, list) or not data:
        raise ProbeFailed("the backend's answer has no embeddings")
    sample: Sample = {"request_ms": Measured(took, "ms")}
    vector = data[0].get("embedding") if isinstance(data[0], dict) else None
    if isinstance(vector, list):
        sample["dimensions"] = Measured(float(len(vector)), "count")
    tokens = _number((answer.get("usage") or {}).get("prompt_tokens"))
    if tokens:
        sample["prompt_tokens"] = Measured(tokens, "tokens")
        sample["tokens_per_second"] = Measured(tokens / max(took / 1000.0, 1e-6), "tokens/s")
    return sample


async def image(client: BackendClient, lease: Lease, config: ModelConfig) -> Sample:
    # A1111's txt2img: sd-server and KoboldCpp both serve it, with the same body.
    answer, took = await _timed_json(client, lease.base_url + "/sdapi/v1/txt2img", json=IMAGE_BODY)
    images = answer.get("images") if isinstance(answer, dict) else None
    if not isinstance(images, list) or not images:
        raise ProbeFailed("the backend's answer has no image")
    return {"request_ms": Measured(took, "ms"), "images": Measured(float(len(images)), "count")}


async def voice(client: BackendClient, lease: Lease, config: ModelConfig) -> Sample:
    """Transcription when the configuration has a speech-to-text model, else speech."""
    if "ttsmodel" in config.components and "whispermodel" not in config.components:
        return await _speech(client, lease, config)
    form = aiohttp.FormData()
    form.add_field("file", tone_wav(AUDIO_SECONDS), filename="bench.wav", content_type="audio/wav")
    form.add_field("model", _model(lease, config))
    form.add_field("response_format", "json")
    answer, took = await _timed_json(client, lease.base_url + "/v1/audio/transcriptions", data=form)
    if not isinstance(answer, dict) or not isinstance(answer.get("text"), str):
        raise ProbeFailed("the backend's answer has no transcript")
    return {
        "request_ms": Measured(took, "ms"),
        "realtime_factor": Measured(AUDIO_SECONDS / max(took / 1000.0, 1e-6), "x"),
    }


async def _speech(client: BackendClient, lease: Lease, config: ModelConfig) -> Sample:
    body = {"model": _model(lease, config), "input": SPEECH_TEXT}
    started = time.monotonic()
    url = lease.base_url + "/v1/audio/speech"
    reply = await client.fetch("POST", url, json=body, deadline=UNBOUNDED)
    raw = _answered(reply, empty_ok=False).body
    return {"request_ms": Measured(_ms(started), "ms"), "audio_bytes": Measured(len(raw), "bytes")}


async def music(client: BackendClient, lease: Lease, config: ModelConfig) -> Sample:
    started = time.monotonic()
    url = lease.base_url + "/api/extra/music/generate"
    reply = await client.fetch("POST", url, json=MUSIC_BODY, deadline=UNBOUNDED)
    raw = _answered(reply).body
    return {"request_ms": Measured(_ms(started), "ms"), "bytes": Measured(len(raw), "bytes")}


def tone_wav(seconds: float, rate: int = 16000) -> bytes:
    """Mono 16-bit PCM: a quiet tone, so a transcriber has something that is not empty."""
    frames = int(seconds * rate)
    pcm = b"".join(
        struct.pack("<h", int(300 * math.sin(2 * math.pi * 220 * i / rate))) for i in range(frames)
    )
    out = io.BytesIO()
    with wave.open(out, "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(rate)
        wav.writeframes(pcm)
    return out.getvalue()


PROBES: Mapping[str, Probe] = {
    "llm": llm,
    "embed": embed,
    "image": image,
    "voice": voice,
    "music": music,
}
