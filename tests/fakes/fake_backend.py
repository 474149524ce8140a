#!/usr/bin/env python3
"""A fake inference backend: one real program imitating five families' HTTP surfaces.

    python tests/fakes/fake_backend.py --family llamacpp -m m.gguf --host 127.0.0.1 --port P

It accepts each family's real argv style (the router's adapters launch it with real flags;
unknown flags are ignored) and fault switches for the reliability matrix (A4.0). Switches
may also come from the environment variable FAKE_BACKEND (shell-style words); they are
merged with the command line, which wins. Every response carries `X-Fake-Model` (the model
path this process serves) and `X-Fake-Pid`, so a test can tell which backend answered.

This file is standalone on purpose (stdlib + aiohttp): a backend is a separate program.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import os
import resource
import shlex
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import BodyPartReader, WSMsgType, web

FAMILIES = {"llamacpp", "kobold", "sdcpp", "whisper", "vllm"}
_ALIASES = {"whispercpp": "whisper", "llama": "llamacpp", "koboldcpp": "kobold", "sd": "sdcpp"}
_INNER = "FAKE_BACKEND_INNER"  # set in the real server under --fork-wrapper/--setsid-child

_VALUE = {  # flag -> option name; exact matches only (argparse would read -mm as -m m)
    "-m": "model",
    "--model": "model",
    "--diffusion-model": "model",
    "--model_param": "model",
    "--host": "host",
    "--listen-ip": "host",
    "--port": "port",
    "--listen-port": "port",
    "-a": "alias",
    "--alias": "alias",
    "-c": "ctx",
    "--ctx-size": "ctx",
    "--contextsize": "ctx",
    "--max-model-len": "ctx",
    "--config": "config",
    "--inference-path": "inference_path",
    "--sdmodel": "sdmodel",
    "--whispermodel": "whispermodel",
    "--embeddingsmodel": "embeddingsmodel",
    "--family": "family",
    "--startup-delay": "startup_delay",
    "--progress-every": "progress_every",
    "--health-503-for": "health_503_for",
    "--exit-at-start": "exit_at_start",
    "--sigterm-delay": "sigterm_delay",
    "--tokens": "tokens",
    "--token-rate": "token_rate",
    "--ttft": "ttft",
    "--crash-after-tokens": "crash_after",
    "--hang-after-tokens": "hang_after",
    "--error-after-tokens": "error_after",
    "--slow-health": "slow_health",
    "--refuse-for": "refuse_for",
    "--record-requests": "record_requests",
    "--record-bodies": "record_bodies",
    "--gate": "gate",
    "--crash-on-field": "crash_on_field",
    "--dying-for": "dying_for",
    "--parallel": "parallel",
    "--slot-save-path": "slot_save_path",
    "--slot-delay": "slot_delay",
    # vLLM's multi-node flags (a gang without Ray): recorded, and `--headless` serves no HTTP
    "--nnodes": "nnodes",
    "--node-rank": "node_rank",
    "--master-addr": "master_addr",
    "--master-port": "master_port",
}
_BOOL = {
    "--native-model-path": "native_model_path",
    "--embedding": "embedding",
    "--embeddings": "embedding",
    "--metrics": "metrics",
    "--print-ready-line": "print_ready_line",
    "--ignore-sigterm": "ignore_sigterm",
    "--fork-wrapper": "fork_wrapper",
    "--setsid-child": "setsid_child",
    "--reset-after-body": "reset_after_body",
    "--close-reused-once": "close_reused_once",
    "--cancel-crashes": "cancel_crashes",
    "--slot-actions": "slot_actions",
    "--apply-template": "apply_template",
    "--enable-sleep-mode": "sleep_mode",
    "--wake-fails": "wake_fails",
    "--headless": "headless",
}
_MODEL_EXT = (".gguf", ".bin", ".safetensors", ".kcpps", ".kcppt", ".ggml")


@dataclass
class Opts:
    family: str = ""
    model: str = ""
    host: str = "127.0.0.1"
    port: int | None = None  # None: the family's default port; 0: any free port
    alias: str = ""
    ctx: int = 4096
    config: str = ""
    inference_path: str = "/inference"
    sdmodel: str = ""
    whispermodel: str = ""
    embeddingsmodel: str = ""
    ttsmodel: str = ""
    musicllm: str = ""
    served: list[str] = field(default_factory=list)
    embedding: bool = False
    metrics: bool = False
    startup_delay: float = 0.0
    progress_every: float = 0.0
    health_503_for: float = 0.0
    exit_at_start: int | None = None
    print_ready_line: bool = False
    ignore_sigterm: bool = False
    sigterm_delay: float = 0.0
    dying_for: float = 0.0  # a crash closes every socket, then takes this long to exit
    fork_wrapper: bool = False
    setsid_child: bool = False
    tokens: int = 8
    token_rate: float = 0.0
    ttft: float = 0.0
    crash_after: int | None = None
    hang_after: int | None = None
    # a stream ends with llama-server's error event after this many tokens, as when the
    # context fills mid-answer (no finish chunk, no [DONE])
    error_after: int | None = None
    slow_health: float = 0.0
    # llama-server builds that name the model by its -m path in /completion answers
    native_model_path: bool = False
    refuse_for: float = 0.0
    reset_after_body: bool = False
    close_reused_once: bool = False  # the first POST on a reused connection: a clean close
    record_requests: str = ""
    record_bodies: str = ""  # generation request bodies as received, one JSON line each
    gate: str = ""  # a file: every generation waits until it exists (a test opens the gate)
    crash_on_field: str = ""  # abort at once on a generation body carrying this field (S27)
    cancel_crashes: bool = False
    parallel: int = 0  # >0: at most this many generations at once, the rest wait (a backlog)
    # llama-server's slot save/restore/erase (opt-in: the router's KV probe would otherwise
    # spend generations on every fake load); files go to --slot-save-path like the real one.
    slot_actions: bool = False
    apply_template: bool = False  # POST /apply-template: what the conversation library replays
    slot_save_path: str = ""
    slot_delay: float = 0.0  # seconds each slot save and restore takes (a big KV cache)
    sleep_mode: bool = False  # vLLM --enable-sleep-mode: /sleep, /wake_up, /is_sleeping
    wake_fails: bool = False  # vLLM: /wake_up answers 500 (the router must load afresh)
    # vLLM multi-node: a follower (`--headless`) only stays up until SIGTERM
    nnodes: int = 1
    node_rank: int = 0
    master_addr: str = ""
    master_port: int = 0
    headless: bool = False
    positional: list[str] = field(default_factory=list)


def parse_args(words: list[str]) -> Opts:
    """Parse merged argv words; later words win; unknown flags are ignored."""
    o = Opts()
    i, after_unknown = 0, False
    while i < len(words):
        w = words[i]
        name, _, inline = w.partition("=") if w.startswith("--") else (w, "", "")
        if name == "--served-model-name":
            o.served = []
            while i + 1 < len(words) and not words[i + 1].startswith("-"):
                i += 1
                o.served.append(words[i])
        elif name in _VALUE:
            value = inline if inline else (words[i + 1] if i + 1 < len(words) else "")
            i += 0 if inline else 1
            _set(o, _VALUE[name], value)
        elif name in _BOOL:
            setattr(o, _BOOL[name], True)
        elif w.startswith("-"):
            after_unknown = True
            i += 1
            continue
        elif not after_unknown or w.endswith(_MODEL_EXT) or o.positional[-1:] == ["serve"]:
            o.positional.append(w)
        after_unknown = False
        i += 1
    _apply_positional(o)
    return o


def _set(o: Opts, name: str, value: str) -> None:
    current = getattr(o, name)
    if isinstance(current, bool):
        setattr(o, name, True)
    elif name in (
        "exit_at_start",
        "crash_after",
        "hang_after",
        "error_after",
        "port",
        "ctx",
        "tokens",
        "parallel",
        "nnodes",
        "node_rank",
        "master_port",
    ):
        setattr(o, name, int(value))
    elif isinstance(current, float):
        setattr(o, name, float(value))
    else:
        setattr(o, name, value)


def _apply_positional(o: Opts) -> None:
    o.family = _ALIASES.get(o.family, o.family)
    pos = [p for p in o.positional if p != "serve"]
    if pos and not o.model and not o.config:
        if pos[0].endswith((".kcpps", ".kcppt")):
            o.config = pos[0]
        else:
            o.model = pos[0]
    if o.config:
        _read_kcpps(o)


def _read_kcpps(o: Opts) -> None:
    try:
        data = json.loads(Path(o.config).read_text())
    except (OSError, ValueError):
        return
    model = data.get("model_param") or data.get("model") or ""
    o.model = o.model or (model[0] if isinstance(model, list) and model else str(model))
    o.sdmodel = o.sdmodel or str(data.get("sdmodel") or "")
    o.whispermodel = o.whispermodel or str(data.get("whispermodel") or "")
    o.embeddingsmodel = o.embeddingsmodel or str(data.get("embeddingsmodel") or "")
    o.ttsmodel = o.ttsmodel or str(data.get("ttsmodel") or "")
    o.musicllm = o.musicllm or str(data.get("musicllm") or "")


# ---- small helpers -------------------------------------------------------------------


def tiny_png(width: int = 8, height: int = 8) -> bytes:
    """A valid grey RGB PNG built with zlib and struct."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(kind + data) & 0xFFFFFFFF
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)

    rows = b"".join(b"\x00" + b"\x80\x80\x80" * width for _ in range(height))
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


async def make_video(fmt: str, frames: int, fps: float, audio: bool = False) -> bytes:
    """A real short clip made by ffmpeg (`avi`: MJPG, + PCM audio when asked; `webm`: VP8),
    small on purpose; placeholder bytes with the container's magic when ffmpeg is missing."""
    frames, rate = max(1, min(frames, 17)), max(1, min(round(fps), 60))
    argv = ["ffmpeg", "-nostdin", "-hide_banner", "-loglevel", "error", "-f", "lavfi"]
    argv += ["-i", f"testsrc=size=64x48:rate={rate}"]
    if audio:
        argv += ["-f", "lavfi", "-i", "sine=frequency=440:sample_rate=22050", "-shortest"]
    argv += ["-frames:v", str(frames)]
    if fmt == "avi":
        argv += ["-c:v", "mjpeg", "-q:v", "5"] + (["-c:a", "pcm_s16le"] if audio else [])
    else:
        argv += ["-c:v", "libvpx", "-b:v", "200k", "-deadline", "realtime", "-an"]
    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, f"clip.{fmt}")
        try:
            proc = await asyncio.create_subprocess_exec(*argv, "-y", out)
            await proc.wait()
            return await asyncio.to_thread(Path(out).read_bytes)
        except OSError:
            magic = b"RIFF\0\0\0\0AVI " if fmt == "avi" else b"\x1a\x45\xdf\xa3"
            return magic + b"fake-video" + bytes(64)


def summarize(value: Any) -> Any:
    """A request body for --record-requests: long strings (base64 media) become their digest."""
    if isinstance(value, dict):
        return {k: summarize(v) for k, v in value.items()}
    if isinstance(value, list):
        return [summarize(v) for v in value]
    if isinstance(value, str) and len(value) > 64:
        data = value.split(",", 1)[1] if value.startswith("data:") else value
        try:
            return "sha256:" + hashlib.sha256(base64.b64decode(data)).hexdigest()
        except ValueError:
            return f"<{len(value)} chars>"
    return value


def embed(text: str, dim: int = 8) -> list[float]:
    digest = hashlib.sha256(text.encode()).digest()
    return [round(b / 255.0 - 0.5, 4) for b in digest[:dim]]


def base64_vector(vec: list[float]) -> str:
    return base64.b64encode(struct.pack(f"<{len(vec)}f", *vec)).decode("ascii")


def stem(path: str) -> str:
    return Path(path).stem if path else "model"


def log(line: str, stream: Any = sys.stderr) -> None:
    print(line, file=stream, flush=True)


DYING_FOR = 0.0  # set from --dying-for at start


def close_reused(st: State, request: web.Request) -> bool:
    """Once: a request arriving on a connection that served one before is closed unanswered,
    as llama-server closes some keep-alive connections just as the client reuses them."""
    key = id(request.transport)
    if key in st.connections and not st.closed_reused:
        st.closed_reused = True
        st.record(event="closed-reused", path=request.path)
        if request.transport is not None:
            request.transport.close()
        return True
    st.connections.add(key)
    return False


def crash(reason: str) -> None:
    log(f"fake backend crash: {reason}")
    if DYING_FOR > 0:
        # A crash that frees gigabytes on a busy machine: the sockets are closed at once (the
        # port refuses, a pooled connection sees EOF), the exit is seen only later.
        for fd in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/self/fd/{fd}").startswith("socket:"):
                    os.close(int(fd))
        time.sleep(DYING_FOR)
    os._exit(134)


class State:
    """Process-wide state shared by the handlers."""

    def __init__(self, o: Opts) -> None:
        self.o = o
        self.t0 = time.monotonic()
        self.created = int(time.time())
        self.ready = False
        self.busy = 0
        self.generated = 0
        self.jobs: dict[str, dict[str, Any]] = {}
        self.connections: set[int] = set()  # --close-reused-once: connections seen
        self.closed_reused = False
        self.slots = asyncio.Semaphore(o.parallel) if o.parallel > 0 else None
        self.slot_prompt: dict[int, str] = {}  # --slot-actions: the prompt each slot caches
        self.sleeping = 0  # vLLM sleep level (0: awake)

    @property
    def model_path(self) -> str:
        o = self.o
        return o.model or o.sdmodel or o.whispermodel or o.config or (o.served[:1] or [""])[0]

    def since_start(self) -> float:
        return time.monotonic() - self.t0

    def record(self, **fields: Any) -> None:
        if self.o.record_requests:
            line = json.dumps({"time": time.time(), "pid": os.getpid(), **fields})
            with open(self.o.record_requests, "a") as fh:
                fh.write(line + "\n")

    def record_body(self, path: str, body: Any) -> None:
        if self.o.record_bodies:
            line = json.dumps({"path": path, "pid": os.getpid(), "body": summarize(body)})
            with open(self.o.record_bodies, "a") as fh:
                fh.write(line + "\n")


async def produce(st: State, n: int, emit: Any = None) -> list[str]:
    """Generate n tokens with the configured timing and faults; emit(i, tok) per token.
    Under `--parallel N`, at most N generations run at once; the others wait their turn."""
    if st.slots is None:
        return await _produce(st, n, emit)
    async with st.slots:
        return await _produce(st, n, emit)


def _gate_open(path: str) -> bool:
    return os.path.exists(path)


async def _produce(st: State, n: int, emit: Any = None) -> list[str]:
    o = st.o
    out: list[str] = []
    while o.gate and not _gate_open(o.gate):  # noqa: ASYNC110 (another process's file)
        await asyncio.sleep(0.01)
    if o.ttft > 0:
        await asyncio.sleep(o.ttft)
    for i in range(n):
        if o.crash_after is not None and i >= o.crash_after:
            crash(f"after {i} tokens")
        if o.hang_after is not None and i >= o.hang_after:
            await asyncio.Event().wait()  # hang until the client goes away
        tok = f"tok{i} "
        out.append(tok)
        st.generated += 1
        if emit is not None:
            await emit(i, tok)
        if o.token_rate > 0:
            await asyncio.sleep(1.0 / o.token_rate)
        elif emit is not None:
            await asyncio.sleep(0)
    return out


def want_tokens(st: State, body: dict[str, Any], *keys: str) -> int:
    if st.o.crash_on_field and st.o.crash_on_field in body:
        crash(f"a body with {st.o.crash_on_field} (--crash-on-field)")
    for key in keys:
        value = body.get(key)
        if isinstance(value, int) and value > 0:
            return value
    return st.o.tokens


async def json_body(request: web.Request) -> dict[str, Any]:
    try:
        data = await request.json()
    except (ValueError, UnicodeDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


async def sse(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
    )
    await resp.prepare(request)
    return resp


def sse_data(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


# ---- OpenAI-style generation (llama-server, KoboldCpp, vLLM) --------------------------


def prompt_tokens(body: dict[str, Any]) -> int:
    return max(1, len(json.dumps(body.get("messages", body.get("prompt", "")))) // 4)


def shape_reply(body: dict[str, Any], choice: dict[str, Any]) -> None:
    """Tools and structured output, as a real backend answers them: a call to the first tool,
    or a JSON object for response_format; enough for clients to parse what they asked for."""
    tools = body.get("tools") or []
    if tools:
        name = tools[0].get("function", {}).get("name", "tool")
        call = {"id": "call-1", "type": "function", "function": {"name": name, "arguments": "{}"}}
        choice["message"] = {"role": "assistant", "content": None, "tool_calls": [call]}
        choice["finish_reason"] = "tool_calls"
    elif (body.get("response_format") or {}).get("type") in ("json_object", "json_schema"):
        choice["message"]["content"] = '{"ok": true}'
        choice["finish_reason"] = "stop"


async def openai_generate(
    request: web.Request, st: State, model: str, chat: bool, reused: bool | None = None
) -> Any:
    body = await json_body(request)
    st.record_body(request.path, body)
    n = want_tokens(st, body, "max_tokens", "max_completion_tokens")
    cid, created = (
        f"{'chatcmpl' if chat else 'cmpl'}-{os.getpid()}-{st.generated}",
        int(time.time()),
    )
    usage: dict[str, Any] = {
        "prompt_tokens": prompt_tokens(body),
        "completion_tokens": n,
        "total_tokens": prompt_tokens(body) + n,
    }
    if reused is not None:  # as llama-server reports it: all but the last token reused
        cached = prompt_tokens(body) - 1 if reused else 0
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    obj = "chat.completion" if chat else "text_completion"
    if not body.get("stream"):
        text = "".join(await produce(st, n))
        choice: dict[str, Any] = {"index": 0, "finish_reason": "length"}
        choice.update(
            {"message": {"role": "assistant", "content": text}} if chat else {"text": text}
        )
        if chat:
            shape_reply(body, choice)
        return web.json_response(
            {
                "id": cid,
                "object": obj,
                "created": created,
                "model": model,
                "choices": [choice],
                "usage": usage,
            }
        )
    resp = await sse(request)

    def chunk(content: str | None, finish: str | None) -> dict[str, Any]:
        c: dict[str, Any] = {"index": 0, "finish_reason": finish}
        c.update(
            {"delta": {"content": content} if content is not None else {}}
            if chat
            else {"text": content or ""}
        )
        return {
            "id": cid,
            "object": obj + ".chunk" if chat else obj,
            "created": created,
            "model": model,
            "choices": [c],
        }

    async def emit(_i: int, tok: str) -> None:
        await resp.write(sse_data(chunk(tok, None)))

    if chat:
        first = chunk(None, None)
        first["choices"][0]["delta"] = {"role": "assistant", "content": ""}
        await resp.write(sse_data(first))
    if st.o.error_after is not None:
        await produce(st, min(n, st.o.error_after), emit)
        await resp.write(sse_data({"error": CONTEXT_EXCEEDED}))
        await resp.write_eof()
        return resp
    await produce(st, n, emit)
    await resp.write(sse_data(chunk(None, "length")))
    if (body.get("stream_options") or {}).get("include_usage"):
        last = chunk(None, None)
        last["choices"], last["usage"] = [], usage
        await resp.write(sse_data(last))
    await resp.write(b"data: [DONE]\n\n")
    await resp.write_eof()
    return resp


def openai_embeddings(body: dict[str, Any], model: str) -> web.Response:
    inputs = body.get("input", "")
    items = inputs if isinstance(inputs, list) else [inputs]
    # llama-server honours `encoding_format: "base64"` (packed little-endian float32), which
    # the openai Python client asks for unless told otherwise.
    encode = base64_vector if body.get("encoding_format") == "base64" else (lambda v: v)
    data = [
        {"object": "embedding", "index": i, "embedding": encode(embed(str(x)))}
        for i, x in enumerate(items)
    ]
    n = sum(len(str(x)) // 4 + 1 for x in items)
    return web.json_response(
        {
            "object": "list",
            "data": data,
            "model": model,
            "usage": {"prompt_tokens": n, "total_tokens": n},
        }
    )


CONTEXT_EXCEEDED = {
    "code": 400,
    "message": "Context size has been exceeded.",
    "type": "exceed_context_size_error",
}


def oai_error(status: int, message: str, kind: str) -> web.Response:
    return web.json_response(
        {"error": {"code": status, "message": message, "type": kind}}, status=status
    )


# ---- llama-server ----------------------------------------------------------------------

LOADING = {"error": {"message": "Loading model", "type": "unavailable_error", "code": 503}}


def llamacpp_routes(st: State) -> web.RouteTableDef:
    r = web.RouteTableDef()
    o = st.o
    model_id = o.alias.split(",")[0] if o.alias else o.model

    @r.get("/health")
    @r.get("/v1/health")
    async def health(_: web.Request) -> web.Response:
        if st.since_start() < o.health_503_for:
            return web.json_response(LOADING, status=503)
        return web.json_response({"status": "ok"})

    @r.get("/models")
    @r.get("/v1/models")
    async def models(_: web.Request) -> web.Response:
        meta = {"n_ctx": o.ctx, "n_ctx_train": o.ctx, "n_vocab": 32000, "n_embd": 64}
        return web.json_response(
            {
                "models": [
                    {
                        "name": model_id,
                        "model": model_id,
                        "type": "model",
                        "capabilities": ["completion"],
                    }
                ],
                "object": "list",
                "data": [
                    {
                        "id": model_id,
                        "object": "model",
                        "created": st.created,
                        "owned_by": "llamacpp",
                        "meta": meta,
                    }
                ],
            }
        )

    @r.get("/props")
    async def props(_: web.Request) -> web.Response:
        return web.json_response(
            {
                "default_generation_settings": {"n_ctx": o.ctx},
                "total_slots": 1,
                "model_path": o.model,
                "model_alias": model_id,
                "build_info": "b0-fake",
            }
        )

    @r.post("/v1/chat/completions")
    @r.post("/chat/completions")
    async def chat(request: web.Request) -> Any:
        reused = None
        if o.slot_actions:  # the conversation now sits in slot 0: a KV save has it to keep
            prompt = json.dumps((await json_body(request)).get("messages", ""))
            reused = st.slot_prompt.get(0) == prompt  # the same prompt again: from the cache
            st.slot_prompt[0] = prompt
        return await openai_generate(request, st, model_id, chat=True, reused=reused)

    @r.post("/v1/completions")
    @r.post("/completions")
    async def completions(request: web.Request) -> Any:
        return await openai_generate(request, st, model_id, chat=False)

    @r.post("/completion")
    async def native(request: web.Request) -> Any:
        return await llamacpp_native(request, st, o.model if o.native_model_path else model_id)

    @r.post("/v1/embeddings")
    @r.post("/embeddings")
    @r.post("/embedding")
    async def embeddings(request: web.Request) -> web.Response:
        if not o.embedding:
            return oai_error(
                501,
                "This server does not support embeddings. Start it with `--embeddings`",
                "not_supported_error",
            )
        return openai_embeddings(await json_body(request), model_id)

    @r.post("/tokenize")
    async def tokenize(request: web.Request) -> web.Response:
        text = str((await json_body(request)).get("content", ""))
        return web.json_response({"tokens": [ord(ch) for ch in text]})

    @r.post("/detokenize")
    async def detokenize(request: web.Request) -> web.Response:
        tokens = (await json_body(request)).get("tokens", [])
        return web.json_response({"content": "".join(chr(int(t)) for t in tokens)})

    @r.get("/slots")
    async def slots(_: web.Request) -> web.Response:
        slot: dict[str, Any] = {"id": 0, "n_ctx": o.ctx, "is_processing": st.busy - 1 > 0}
        if 0 in st.slot_prompt:
            slot["n_prompt_tokens"] = _tokens_of(st.slot_prompt[0])
        return web.json_response([slot])

    if o.slot_actions:
        r.post("/slots/{id}")(lambda request: slot_action(request, st))

    if o.apply_template:  # without it, a 404 like a llama-server before the route

        @r.post("/apply-template")
        async def apply_template(request: web.Request) -> web.Response:
            messages = (await json_body(request)).get("messages", [])
            return web.json_response({"prompt": json.dumps(messages)})

    @r.get("/metrics")
    async def metrics(_: web.Request) -> web.Response:
        if not o.metrics:
            return oai_error(
                501,
                "This server does not support metrics endpoint. Start it with `--metrics`",
                "not_supported_error",
            )
        text = (
            f"llamacpp:tokens_predicted_total {st.generated}\n"
            f"llamacpp:requests_processing {st.busy}\n"
        )
        return web.Response(text=text, content_type="text/plain")

    return r


def _tokens_of(prompt: str) -> int:
    return max(1, len(prompt) // 4)


def _slot_timings(st: State, body: dict[str, Any]) -> dict[str, int]:
    """--slot-actions: a repeated prompt on the same slot is reused, as llama-server does
    (all but one token); `timings` as llama-server's /completion reports them."""
    prompt = json.dumps(body.get("prompt", ""))
    slot = body.get("id_slot") if isinstance(body.get("id_slot"), int) else 0
    total = _tokens_of(prompt)
    cached = total - 1 if st.slot_prompt.get(slot) == prompt else 0
    st.slot_prompt[slot] = prompt
    return {"prompt_n": total - cached, "cache_n": cached}


async def slot_action(request: web.Request, st: State) -> web.Response:
    """POST /slots/{id}?action=save|restore|erase, answered like llama-server."""
    slot = int(request.match_info["id"])
    action = request.query.get("action", "")
    folder = Path(st.o.slot_save_path)
    if action == "erase":
        st.slot_prompt.pop(slot, None)
        return web.json_response({"id_slot": slot, "n_erased": 1})
    name = str((await json_body(request)).get("filename", ""))
    if action in ("save", "restore"):
        await asyncio.sleep(st.o.slot_delay)
    if not st.o.slot_save_path or not name or "/" in name:
        return oai_error(400, "Invalid filename", "invalid_request_error")
    if action == "save" and slot in st.slot_prompt:
        (folder / name).write_text(st.slot_prompt[slot])
        n = _tokens_of(st.slot_prompt[slot])
        return web.json_response({"id_slot": slot, "filename": name, "n_saved": n})
    if action == "restore" and (folder / name).is_file():
        st.slot_prompt[slot] = (folder / name).read_text()
        n = _tokens_of(st.slot_prompt[slot])
        return web.json_response({"id_slot": slot, "filename": name, "n_restored": n})
    return oai_error(400, f"Failed to {action} slot {slot}", "invalid_request_error")


async def llamacpp_native(request: web.Request, st: State, model: str) -> Any:
    body = await json_body(request)
    n = want_tokens(st, body, "n_predict", "max_tokens")
    if not body.get("stream"):
        timings = _slot_timings(st, body) if st.o.slot_actions else None
        text = "".join(await produce(st, n))
        answer = {
            "content": text,
            "model": model,
            "tokens_predicted": n,
            "tokens_evaluated": prompt_tokens(body),
            "stop": True,
        }
        if timings is not None:
            answer["timings"] = timings
        return web.json_response(answer)
    resp = await sse(request)

    async def emit(_i: int, tok: str) -> None:
        await resp.write(sse_data({"content": tok, "stop": False}))

    await produce(st, n, emit)
    await resp.write(sse_data({"content": "", "stop": True, "model": model, "tokens_predicted": n}))
    await resp.write_eof()
    return resp


# ---- KoboldCpp ---------------------------------------------------------------------------


def kobold_routes(st: State) -> web.RouteTableDef:
    r = web.RouteTableDef()
    o = st.o
    name = f"koboldcpp/{stem(o.model or o.config)}"
    png = tiny_png()

    @r.get("/api/extra/version")
    async def version(_: web.Request) -> web.Response:
        return web.json_response(
            {
                "result": "KoboldCpp",
                "version": "1.116.1",
                "protected": False,
                "llm": bool(o.model),
                "txt2img": bool(o.sdmodel),
                "vision": False,
                "audio": False,
                "transcribe": bool(o.whispermodel),
                "tts": bool(o.ttsmodel),
                "embeddings": bool(o.embeddingsmodel),
                "music": bool(o.musicllm),
                "admin": 0,
            }
        )

    @r.get("/api/v1/model")
    async def model(_: web.Request) -> web.Response:
        return web.json_response({"result": name})

    @r.get("/v1/models")
    @r.get("/models")
    async def models(_: web.Request) -> web.Response:
        return web.json_response(
            {
                "object": "list",
                "data": [
                    {
                        "id": name,
                        "object": "model",
                        "created": st.created,
                        "owned_by": "koboldcpp",
                        "status": {"value": "loaded"},
                        "permission": [],
                        "root": "koboldcpp",
                    }
                ],
            }
        )

    @r.post("/api/v1/generate")
    async def generate(request: web.Request) -> web.Response:
        body = await json_body(request)
        n = want_tokens(st, body, "max_length")
        text = "".join(await produce(st, n))
        return web.json_response(
            {
                "results": [
                    {
                        "text": text,
                        "finish_reason": "length",
                        "prompt_tokens": prompt_tokens(body),
                        "completion_tokens": n,
                    }
                ]
            }
        )

    @r.post("/api/extra/generate/stream")
    async def stream(request: web.Request) -> web.StreamResponse:
        n = want_tokens(st, await json_body(request), "max_length")
        resp = await sse(request)

        async def emit(_i: int, tok: str) -> None:
            payload = json.dumps({"token": tok, "finish_reason": None})
            await resp.write(f"event: message\ndata: {payload}\n\n".encode())

        await produce(st, n, emit)
        final = json.dumps({"token": "", "finish_reason": "length"})
        await resp.write(f"event: message\ndata: {final}\n\n".encode())
        await resp.write_eof()
        return resp

    @r.post("/v1/chat/completions")
    @r.post("/chat/completions")
    async def chat(request: web.Request) -> Any:
        return await openai_generate(request, st, name, chat=True)

    @r.post("/v1/completions")
    @r.post("/completions")
    async def completions(request: web.Request) -> Any:
        return await openai_generate(request, st, name, chat=False)

    @r.post("/v1/embeddings")
    @r.post("/api/extra/embeddings")
    async def embeddings(request: web.Request) -> web.Response:
        return openai_embeddings(await json_body(request), name)

    @r.post("/sdapi/v1/txt2img")
    @r.post("/sdapi/v1/img2img")
    async def txt2img(request: web.Request) -> web.Response:
        body = await json_body(request)
        await produce(st, 0)
        image = png
        if int(body.get("frames") or 0) > 1:  # a clip: KoboldCpp answers with the container
            extra = body.get("extra_images") or []
            audio = any(str(x).startswith("data:audio/") for x in extra)
            st.record(path=request.path, body=summarize(body), audio=audio)
            fmt = "avi" if body.get("video_output_type") == 1 else "webm"
            image = await make_video(fmt, int(body["frames"]), float(body.get("fps") or 16), audio)
        return web.json_response(
            {
                "images": [base64.b64encode(image).decode()],
                "parameters": {},
                "info": json.dumps({"model": o.sdmodel}),
                "animated": image is not png,
            }
        )

    @r.post("/api/extra/transcribe")
    @r.post("/v1/audio/transcriptions")
    async def transcribe(request: web.Request) -> web.Response:
        size = len(await request.read())
        return web.json_response({"text": f" fake transcript of {size} bytes"})

    @r.post("/api/extra/tts")
    @r.post("/v1/audio/speech")
    async def tts(request: web.Request) -> web.Response:
        text = str((await json_body(request)).get("input") or "")
        return web.Response(body=tiny_wav(len(text)), content_type="audio/wav")

    @r.get("/v1/audio/voices")
    @r.get("/audio/voices")
    async def voices(_: web.Request) -> web.Response:
        return web.json_response({"voices": ["kobo", "cheery"]})

    @r.get("/musicui")
    async def musicui(_: web.Request) -> web.Response:
        return web.Response(text="<html>music</html>", content_type="text/html")

    @r.post("/api/extra/music/{step}")
    async def music(request: web.Request) -> web.Response:
        await request.read()
        return web.json_response({"step": request.match_info["step"], "model": o.musicllm})

    add_sdapi_discovery(r, stem(o.sdmodel))

    @r.post("/upload/image")
    @r.post("/api/upload/image")
    async def upload(request: web.Request) -> web.Response:
        raw = await request.read()
        st.record(path=request.path, size=len(raw), sha256=hashlib.sha256(raw).hexdigest())
        return web.json_response({"name": "kcpp_img2img.jpg", "subfolder": "", "type": "input"})

    @r.post("/prompt")
    @r.post("/api/prompt")
    async def prompt(request: web.Request) -> web.Response:
        await request.read()
        await produce(st, 0)
        return web.json_response({"prompt_id": KOBOLD_PROMPT_ID, "number": 0, "node_errors": {}})

    @r.get("/history")
    @r.get("/history/{pid}")
    @r.get("/api/history")
    @r.get("/api/history/{pid}")
    async def history(_: web.Request) -> web.Response:
        image = {"filename": "kliteimg_00001_.png", "subfolder": "", "type": "output"}
        return web.json_response(
            {
                KOBOLD_PROMPT_ID: {
                    "outputs": {"9": {"images": [image]}},
                    "status": {"status_str": "success", "completed": True, "messages": []},
                }
            }
        )

    @r.get("/view")
    @r.get("/api/view")
    async def view(_: web.Request) -> web.Response:
        return web.Response(body=png, content_type="image/png")

    return r


KOBOLD_PROMPT_ID = "12345678-0000-0000-0000-000000000001"


# ---- sd-server ---------------------------------------------------------------------------


def sdcpp_routes(st: State) -> web.RouteTableDef:
    r = web.RouteTableDef()
    o = st.o
    png64 = base64.b64encode(tiny_png()).decode()

    @r.get("/v1/models")
    async def models(_: web.Request) -> web.Response:
        return web.json_response(
            {"data": [{"id": "sd-cpp-local", "object": "model", "owned_by": "local"}]}
        )

    @r.get("/sdcpp/v1/capabilities")
    async def capabilities(_: web.Request) -> web.Response:
        return web.json_response(
            {
                "model": {"name": Path(o.model).name, "stem": stem(o.model), "path": o.model},
                "current_mode": "img_gen",
                "supported_modes": ["img_gen", "vid_gen"],
                "output_formats_by_mode": {"img_gen": ["png"], "vid_gen": ["webm"]},
                "limits": {
                    "min_width": 64,
                    "max_width": 2048,
                    "min_height": 64,
                    "max_height": 2048,
                    "max_batch_count": 8,
                    "max_queue_size": 64,
                },
            }
        )

    add_sdapi_discovery(r, stem(o.model))

    @r.post("/sdapi/v1/txt2img")
    @r.post("/sdapi/v1/img2img")
    async def txt2img(request: web.Request) -> web.Response:
        body = await json_body(request)
        await produce(st, 0)
        count = int(body.get("batch_size") or 1)
        return web.json_response({"images": [png64] * count, "parameters": body, "info": ""})

    @r.post("/v1/images/generations")
    async def generations(request: web.Request) -> web.Response:
        body = await json_body(request)
        await produce(st, 0)
        data = [{"index": i, "b64_json": png64} for i in range(int(body.get("n") or 1))]
        return web.json_response(
            {"created": int(time.time()), "output_format": "png", "data": data}
        )

    @r.post("/sdcpp/v1/img_gen")
    @r.post("/sdcpp/v1/vid_gen")
    async def submit(request: web.Request) -> web.Response:
        body = await json_body(request)
        kind = request.path.rsplit("/", 1)[-1]
        job_id = f"job_{os.getpid()}_{len(st.jobs)}"
        st.jobs[job_id] = {
            "id": job_id,
            "kind": kind,
            "status": "queued",
            "created": int(time.time()),
            "started": None,
            "completed": None,
            "queue_position": 0,
            "result": None,
            "error": None,
        }
        asyncio.get_running_loop().create_task(run_job(st, job_id, body))
        return web.json_response(
            {**st.jobs[job_id], "poll_url": f"/sdcpp/v1/jobs/{job_id}"}, status=202
        )

    @r.get("/sdcpp/v1/jobs/{job_id}")
    async def job(request: web.Request) -> web.Response:
        found = st.jobs.get(request.match_info["job_id"])
        if found is None:
            return web.json_response({"error": "job not found"}, status=404)
        return web.json_response(found)

    @r.post("/sdcpp/v1/jobs/{job_id}/cancel")
    async def cancel(request: web.Request) -> web.Response:
        found = st.jobs.get(request.match_info["job_id"])
        if found is None:
            return web.json_response({"error": "job not found"}, status=404)
        if found["status"] == "generating":
            return web.json_response(
                {"error": "job is currently generating and cannot be interrupted yet"}, status=409
            )
        found.update(
            status="cancelled", error={"code": "cancelled", "message": "job cancelled by client"}
        )
        return web.json_response(found)

    return r


def add_sdapi_discovery(r: web.RouteTableDef, checkpoint: str) -> None:
    """A1111 discovery both image backends answer: lists, and options naming the model."""

    @r.get("/sdapi/v1/loras")
    async def loras(_: web.Request) -> web.Response:
        return web.json_response([{"name": f"lora-of-{checkpoint}", "path": "x.safetensors"}])

    @r.get("/sdapi/v1/samplers")
    async def samplers(_: web.Request) -> web.Response:
        return web.json_response([{"name": "euler", "aliases": [], "options": {}}])

    @r.get("/sdapi/v1/options")
    async def options(_: web.Request) -> web.Response:
        return web.json_response({"samples_format": "png", "sd_model_checkpoint": checkpoint})


def tiny_wav(samples: int = 16) -> bytes:
    """A valid 16 kHz mono 16-bit PCM WAV of silence."""
    data = bytes(2 * samples)
    fmt = struct.pack("<HHIIHH", 1, 1, 16000, 32000, 2, 16)
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data"
    return (
        b"RIFF"
        + struct.pack("<I", len(body) + 4 + len(data))
        + body
        + struct.pack("<I", len(data))
        + data
    )


async def run_job(st: State, job_id: str, body: dict[str, Any]) -> None:
    job = st.jobs[job_id]
    await asyncio.sleep(0.01)
    if job["status"] != "queued":
        return
    job.update(status="generating", started=int(time.time()))
    await produce(st, 0)
    if job["kind"] == "vid_gen":
        frames = int(body.get("video_frames") or 5)
        fmt = "avi" if body.get("output_format") == "avi" else "webm"
        st.record(path="/sdcpp/v1/vid_gen", body=summarize(body))
        clip = await make_video(fmt, frames, float(body.get("fps") or 16))
        result = {
            "output_format": fmt,
            "mime_type": "video/x-msvideo" if fmt == "avi" else "video/webm",
            "fps": 16,
            "frame_count": frames,
            "b64_json": base64.b64encode(clip).decode(),
        }
    else:
        result = {
            "output_format": "png",
            "images": [{"index": 0, "b64_json": base64.b64encode(tiny_png()).decode()}],
        }
    job.update(status="completed", completed=int(time.time()), result=result)


# ---- whisper-server -------------------------------------------------------------------------


def whisper_routes(st: State) -> web.RouteTableDef:
    r = web.RouteTableDef()

    @r.get("/health")
    async def health(_: web.Request) -> web.Response:
        if st.since_start() < st.o.health_503_for:
            return web.json_response({"status": "loading model"}, status=503)
        return web.json_response({"status": "ok"})

    async def inference(request: web.Request) -> web.Response:
        return await whisper_inference(request, st)

    for path in {st.o.inference_path, "/inference", "/v1/audio/transcriptions"}:
        r.post(path)(inference)
    return r


async def whisper_inference(request: web.Request, st: State) -> web.Response:
    fields: dict[str, str] = {}
    size, head = -1, b""
    if request.content_type.startswith("multipart/"):
        reader = await request.multipart()
        while (part := await reader.next()) is not None:
            if not isinstance(part, BodyPartReader):
                continue  # nested multipart: whisper-server does not read it either
            if part.name == "file":  # read in chunks: uploads may be hundreds of MB
                size = 0
                while chunk := await part.read_chunk(1 << 20):
                    head, size = head or chunk[:16], size + len(chunk)
            elif part.name:
                fields.setdefault(part.name, await part.text())  # the first value wins
    st.record(event="inference", fields=fields, size=size, magic=head[:4].decode("latin-1"))
    if size < 0:
        return web.json_response({"error": "no 'file' field in the request"}, status=400)
    await produce(st, 0)
    text = f" fake transcript of {size} bytes"
    fmt = fields.get("response_format", "json")
    if fmt == "text":
        return web.Response(text=text, content_type="text/html", charset="utf-8")
    if fmt == "srt":
        return web.Response(
            text=f"1\n00:00:00,000 --> 00:00:01,000\n{text}\n\n",
            content_type="application/x-subrip",
        )
    if fmt == "vtt":
        return web.Response(
            text=f"WEBVTT\n\n00:00:00.000 --> 00:00:01.000\n{text}\n\n", content_type="text/vtt"
        )
    if fmt == "verbose_json":
        seg = {
            "id": 0,
            "text": text,
            "start": 0.0,
            "end": 1.0,
            "tokens": [1, 2],
            "temperature": 0.0,
            "avg_logprob": -0.1,
            "no_speech_prob": 0.0,
        }
        return web.json_response(
            {
                "task": "translate" if fields.get("translate") == "true" else "transcribe",
                "language": "en",
                "duration": 1.0,
                "text": text,
                "segments": [seg],
            }
        )
    return web.json_response({"text": text})


# ---- vLLM ----------------------------------------------------------------------------------


def vllm_routes(st: State) -> web.RouteTableDef:
    r = web.RouteTableDef()
    o = st.o
    names = o.served or [o.model]

    def unknown_model(body: dict[str, Any]) -> web.Response | None:
        model = body.get("model")
        if model in (None, *names):
            return None
        return web.json_response(
            {
                "error": {
                    "message": f"The model `{model}` does not exist.",
                    "type": "NotFoundError",
                    "param": "model",
                    "code": 404,
                }
            },
            status=404,
        )

    @r.get("/health")
    @r.get("/ping")
    async def health(_: web.Request) -> web.Response:
        return web.Response(status=503 if st.since_start() < o.health_503_for else 200)

    @r.get("/v1/models")
    async def models(_: web.Request) -> web.Response:
        data: list[dict[str, Any]] = [
            {
                "id": n,
                "object": "model",
                "created": st.created,
                "owned_by": "vllm",
                "root": o.model,
                "parent": None,
                "max_model_len": o.ctx,
                "permission": [],
            }
            for n in names
        ]
        return web.json_response({"object": "list", "data": data})

    @r.get("/version")
    async def version(_: web.Request) -> web.Response:
        return web.json_response({"version": "0.30.0+fake"})

    @r.get("/load")
    async def load(_: web.Request) -> web.Response:
        return web.json_response({"server_load": st.busy - 1})  # not counting this request

    @r.get("/metrics")
    async def metrics(_: web.Request) -> web.Response:
        return web.Response(text=f"vllm:num_requests_running {st.busy - 1}\n")

    async def generate(request: web.Request, chat: bool) -> Any:
        body = await json_body(request)
        error = asleep() or unknown_model(body)
        if error is not None:
            return error
        return await openai_generate(request, st, str(body.get("model") or names[0]), chat)

    r.post("/v1/chat/completions")(lambda req: generate(req, True))
    r.post("/v1/completions")(lambda req: generate(req, False))

    @r.post("/v1/embeddings")
    async def embeddings(request: web.Request) -> web.Response:
        body = await json_body(request)
        error = asleep() or unknown_model(body)
        return error or openai_embeddings(body, str(body.get("model") or names[0]))

    @r.post("/tokenize")
    async def tokenize(request: web.Request) -> web.Response:
        text = str((await json_body(request)).get("prompt", ""))
        tokens = [ord(ch) for ch in text]
        return web.json_response({"count": len(tokens), "max_model_len": o.ctx, "tokens": tokens})

    @r.post("/detokenize")
    async def detokenize(request: web.Request) -> web.Response:
        tokens = (await json_body(request)).get("tokens", [])
        return web.json_response({"prompt": "".join(chr(int(t)) for t in tokens)})

    def asleep() -> web.Response | None:
        """vLLM's answer to a request that needs the weights while the engine sleeps."""
        if not st.sleeping:
            return None
        message = (
            "Model is currently in sleep mode. Please wake it up first with a POST request "
            "to /wake_up"
        )
        body = {"error": {"message": message, "type": "ModelSleepingError", "code": 503}}
        return web.json_response(body, status=503)

    # Sleep mode: --enable-sleep-mode, and the routes only with VLLM_SERVER_DEV_MODE=1.
    if o.sleep_mode and os.environ.get("VLLM_SERVER_DEV_MODE") == "1":
        vllm_sleep_routes(r, st)
    vllm_responses(r, st, names)
    r.get("/v1/realtime")(lambda req: realtime_echo(req, st))
    return r


def vllm_sleep_routes(r: web.RouteTableDef, st: State) -> None:
    """POST /sleep?level=N, POST /wake_up, GET /is_sleeping, as vLLM answers them."""

    @r.post("/sleep")
    async def sleep(request: web.Request) -> web.Response:
        st.sleeping = int(request.query.get("level", "1"))
        st.record(event="sleep", level=st.sleeping)
        return web.Response(status=200)

    @r.post("/wake_up")
    async def wake_up(_: web.Request) -> web.Response:
        st.record(event="wake_up")
        if st.o.wake_fails:
            return web.json_response({"error": "wake_up failed (--wake-fails)"}, status=500)
        st.sleeping = 0
        return web.Response(status=200)

    @r.get("/is_sleeping")
    async def is_sleeping(_: web.Request) -> web.Response:
        return web.json_response({"is_sleeping": st.sleeping > 0})


def vllm_responses(r: web.RouteTableDef, st: State, names: list[str]) -> None:
    """/v1/responses with ids that name this process (`resp_<pid>_<n>`), kept for GET/cancel."""

    @r.post("/v1/responses")
    async def create(request: web.Request) -> web.StreamResponse:
        body = await json_body(request)
        rid = f"resp_{os.getpid()}_{len(st.jobs)}"
        obj = {"id": rid, "object": "response", "model": body.get("model") or names[0]}
        st.jobs[rid] = {**obj, "status": "completed", "output_text": "tok0 "}
        if not body.get("stream"):
            return web.json_response(st.jobs[rid])
        resp = await sse(request)
        created = {"type": "response.created", "response": {**obj, "status": "in_progress"}}
        for kind, data in (
            ("response.created", created),
            (
                "response.output_text.delta",
                {"type": "response.output_text.delta", "delta": "tok0 "},
            ),
            ("response.completed", {"type": "response.completed", "response": st.jobs[rid]}),
        ):
            await resp.write(f"event: {kind}\n".encode() + sse_data(data))
        await resp.write_eof()
        return resp

    def found(request: web.Request) -> dict[str, Any] | web.Response:
        job = st.jobs.get(request.match_info["rid"])
        if job is None:
            return oai_error(
                404,
                f"Response with id {request.match_info['rid']} not found",
                "invalid_request_error",
            )
        return job

    @r.get("/v1/responses/{rid}")
    async def get(request: web.Request) -> web.Response:
        job = found(request)
        return job if isinstance(job, web.Response) else web.json_response(job)

    @r.post("/v1/responses/{rid}/cancel")
    async def cancel(request: web.Request) -> web.Response:
        job = found(request)
        if isinstance(job, web.Response):
            return job
        job["status"] = "cancelled"
        return web.json_response(job)


async def realtime_echo(request: web.Request, st: State) -> web.WebSocketResponse:
    """Echo text and binary frames; `close:<code>` closes with that code, `big:<n>` sends n bytes."""
    ws = web.WebSocketResponse(max_msg_size=0)
    await ws.prepare(request)
    st.busy += 1  # an open session is work in progress, as with the real backend
    try:
        async for msg in ws:
            if msg.type is WSMsgType.BINARY:
                await ws.send_bytes(msg.data)
            elif msg.type is WSMsgType.TEXT and msg.data.startswith("close:"):
                await ws.close(code=int(msg.data[6:]), message=b"fake backend closed")
            elif msg.type is WSMsgType.TEXT and msg.data.startswith("big:"):
                await ws.send_bytes(b"x" * int(msg.data[4:]))
            elif msg.type is WSMsgType.TEXT:
                await ws.send_str(msg.data)
    finally:
        st.busy -= 1
        st.record(event="ws-closed", path=request.path, code=ws.close_code)
    return ws


# ---- a backend's own WebUI (every family; tests/webuis/test_proxy.py) -----------------------

UI_PATHS = ("/lcpp/", "/sdui/", "/musicui/")  # KoboldCpp's secondary UIs (the root is "/")


def ui_routes(st: State) -> web.RouteTableDef:
    """A static page with the headers a backend might send (a cookie, open CORS, its own
    framing rule), a script, a redirect to the backend's own absolute URL, and an echo of
    what the backend received."""
    r = web.RouteTableDef()

    async def page(request: web.Request) -> web.Response:
        html = f"<!doctype html><title>fake {st.o.family} ui</title><p>{request.path}</p>"
        return web.Response(
            text=html,
            content_type="text/html",
            headers={
                "Set-Cookie": "backend_session=1; Path=/",
                "Access-Control-Allow-Origin": "*",
                "X-Frame-Options": "ALLOWALL",
            },
        )

    r.get("/")(page)
    for prefix in UI_PATHS:
        r.get(prefix + "{tail:.*}")(page)

    @r.get("/assets/{name}")
    async def asset(request: web.Request) -> web.Response:
        return web.Response(text="console.log('fake');", content_type="text/javascript")

    @r.get("/ui-redirect")
    async def redirect(request: web.Request) -> web.Response:
        target = request.query.get("to", "/ui-landing?x=1")
        location = target if "://" in target else f"http://{request.host}{target}"
        return web.Response(status=302, headers={"Location": location})

    @r.route("*", "/ui-echo")
    async def echo(request: web.Request) -> web.Response:
        body = await request.read()
        return web.json_response(
            {
                "method": request.method,
                "path": request.path,
                "query": request.query_string,
                "headers": dict(request.headers),
                "body_bytes": len(body),
            }
        )

    return r


# ---- server, faults and lifecycle ----------------------------------------------------------

ROUTES = {
    "llamacpp": llamacpp_routes,
    "kobold": kobold_routes,
    "sdcpp": sdcpp_routes,
    "whisper": whisper_routes,
    "vllm": vllm_routes,
}
PROBES = {"/health", "/v1/health", "/api/extra/version", "/sdcpp/v1/capabilities", "/ping"}
READY_LINES = {  # (stream, text) each family prints once it accepts connections
    "llamacpp": ("stderr", "main: server is listening on http://{h}:{p} - starting the main loop"),
    "kobold": ("stdout", "======\nPlease connect to custom endpoint at http://{h}:{p}"),
    "sdcpp": ("stdout", "[INFO ] main.cpp - listening on: http://{h}:{p}"),
    "whisper": ("stderr", "whisper server listening at http://{h}:{p}"),
    "vllm": ("stderr", "INFO:     Uvicorn running on http://{h}:{p} (Press CTRL+C to quit)"),
}
FATAL_LINES = {
    "llamacpp": "srv    load_model: failed to load model\nmain: exiting due to model loading error",
    "kobold": "Could not load text model: fake failure",
    "sdcpp": "[ERROR] main.cpp - new_sd_ctx_t failed",
    "whisper": "error: failed to initialize whisper context",
    "vllm": "RuntimeError: Engine core initialization failed. See root cause above.",
}
DEFAULT_PORTS = {"llamacpp": 8080, "kobold": 5001, "sdcpp": 1234, "whisper": 8080, "vllm": 8000}


def make_app(st: State) -> web.Application:
    @web.middleware
    async def faults(request: web.Request, handler: Any) -> web.StreamResponse:
        st.record(
            event="request",
            path=request.path,
            method=request.method,
            disconnected=False,
            request_id=request.headers.get("X-Request-Id"),
            traceparent=request.headers.get("traceparent"),  # the router's hop (tests/tracing)
        )
        if st.o.family == "llamacpp" and not st.ready:
            return web.json_response(LOADING, status=503)
        if request.path in PROBES and st.o.slow_health > 0:
            await asyncio.sleep(st.o.slow_health)
        if st.o.close_reused_once and request.method == "POST" and close_reused(st, request):
            raise asyncio.CancelledError  # closed (FIN), no answer: a stale keep-alive connection
        if st.o.reset_after_body and request.method == "POST":
            await request.read()
            reset_connection(request)
            raise asyncio.CancelledError  # no response: the peer sees a reset
        st.busy += 1
        try:
            return await handler(request)
        except (asyncio.CancelledError, ConnectionResetError):
            st.record(event="disconnect", path=request.path, disconnected=True)
            if st.o.cancel_crashes:
                crash("client aborted a generation (--cancel-crashes)")
            raise
        finally:
            st.busy -= 1

    async def identify(_: web.Request, resp: web.StreamResponse) -> None:
        resp.headers["X-Fake-Model"] = st.model_path
        resp.headers["X-Fake-Pid"] = str(os.getpid())

    app = web.Application(middlewares=[faults], client_max_size=1 << 30)
    app.on_response_prepare.append(identify)
    app.add_routes(ROUTES[st.o.family](st))
    app.add_routes(ui_routes(st))
    return app


def reset_connection(request: web.Request) -> None:
    transport = request.transport
    if transport is None:
        return
    sock = transport.get_extra_info("socket")
    if sock is not None:  # linger 0: close() sends RST instead of FIN
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


async def wait_with_progress(st: State, until: float) -> None:
    """Sleep until `until` seconds after start, printing progress if asked."""
    o = st.o
    while (left := until - st.since_start()) > 0:
        step = min(left, o.progress_every) if o.progress_every > 0 else left
        await asyncio.sleep(step)
        if o.progress_every > 0:
            pct = min(100, int(100 * st.since_start() / max(until, 1e-6)))
            log(f"load_tensors: loading model tensors {pct}%")


def install_signals(st: State, loop: asyncio.AbstractEventLoop) -> None:
    if st.o.ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        return

    def on_term() -> None:
        log("fake backend: received SIGTERM, shutting down")
        loop.call_later(st.o.sigterm_delay, exit_on_term, st.o.family)

    loop.add_signal_handler(signal.SIGTERM, on_term)
    loop.add_signal_handler(signal.SIGINT, on_term)


def exit_on_term(family: str) -> None:
    sys.stdout.flush()
    if family == "sdcpp":  # the real sd-server dies from the signal
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
    os._exit(0)


async def serve(o: Opts) -> None:
    st = State(o)
    loop = asyncio.get_running_loop()
    install_signals(st, loop)
    runner = web.AppRunner(make_app(st), handler_cancellation=True, access_log=None)
    await runner.setup()
    bind_at = o.refuse_for if o.family == "llamacpp" else max(o.refuse_for, o.startup_delay)
    await wait_with_progress(st, bind_at)
    site = web.TCPSite(
        runner, o.host, DEFAULT_PORTS[o.family] if o.port is None else o.port, reuse_address=True
    )
    await site.start()
    await wait_with_progress(st, o.startup_delay)
    if o.exit_at_start is not None:
        log(FATAL_LINES[o.family])
        os._exit(o.exit_at_start)
    st.ready = True
    if o.print_ready_line:
        stream, text = READY_LINES[o.family]
        port = DEFAULT_PORTS[o.family] if o.port is None else o.port
        log(text.format(h=o.host, p=port), sys.stdout if stream == "stdout" else sys.stderr)
    await asyncio.Event().wait()


async def follow(o: Opts) -> None:
    """vLLM's `--headless` follower: no API server (nothing listens), it joins the head at
    `--master-addr/--master-port` and runs until stopped. The fake only says where it would
    connect and waits for its signal; a test reads its argv from the process."""
    st = State(o)
    install_signals(st, asyncio.get_running_loop())
    if o.exit_at_start is not None:  # one that cannot join (bad flags, missing files)
        log(FATAL_LINES[o.family])
        os._exit(o.exit_at_start)
    log(
        f"fake vllm follower: rank {o.node_rank} of {o.nnodes}, "
        f"head at {o.master_addr}:{o.master_port}, model {o.model!r}"
    )
    await asyncio.Event().wait()


def exec_wrapper(o: Opts, argv: list[str]) -> None:
    """--fork-wrapper: become a bash wrapper whose background child is the server."""
    env = {**os.environ, _INNER: "1"}
    script = '"$@" & wait $!'
    os.execvpe("bash", ["bash", "-c", script, "fake-wrapper", sys.executable, *argv], env)


def run_setsid_child(argv: list[str]) -> int:
    """--setsid-child: the server runs in a child that left our session and group."""
    env = {**os.environ, _INNER: "1"}
    child = subprocess.Popen([sys.executable, *argv], env=env, start_new_session=True)
    return child.wait()


def main() -> int:
    words = shlex.split(os.environ.get("FAKE_BACKEND", "")) + sys.argv[1:]
    o = parse_args(words)
    if o.family not in FAMILIES:
        log(f"fake_backend: --family must be one of {sorted(FAMILIES)}, got {o.family!r}")
        return 2
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if not os.environ.get(_INNER):
        if o.fork_wrapper:
            exec_wrapper(o, sys.argv)
        if o.setsid_child:
            return run_setsid_child(sys.argv)
    log(f"fake backend {o.family} pid {os.getpid()} model {o.model or o.config!r}")
    global DYING_FOR
    DYING_FOR = o.dying_for
    asyncio.run(follow(o) if o.headless else serve(o))
    return 0


if __name__ == "__main__":
    sys.exit(main())
