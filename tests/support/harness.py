"""A real router on a real socket, with fake backends launched through the real supervisor.

`RouterHarness` writes `.kcpps` files and a Settings whose program sections point at
executable wrappers around tests/fakes/fake_backend.py, starts `create_app()` on an aiohttp
TestServer (real 127.0.0.1 socket, handler cancellation on, as `tensor-router start` runs it)
and hands out an httpx client. Fault switches per family go in FAKE_BACKEND. The per-family
dicts are keyed by `Family` value (`"llamacpp"`, `"whispercpp"`, ...), the keys of
`router.config.PROGRAM_SECTIONS`.

Extensions for the reliability-matrix tests (R rows):
- `faults_for_model[model_id] = "--exit-at-start 1"`: switches for one model only (the family's
  binary is a small dispatcher that adds them when the model's file is in its argv).
- `wrap[family] = "fork" | "setsid"`: the family's binary_path becomes a bash wrapper that runs
  the fake backend as a background child (R2) or in a new session (R3) and waits for it.
- `read_sse()` parses a streamed response into events with their arrival times.
- `records()` reads a `--record-requests` file.
- `programs[family] = Path(...)`: run the family's real binary instead of the fake backend
  (tests/real); `extra_args[family] = [...]` adds that section's extra_args (e.g. `-t 1`).
"""

from __future__ import annotations

import asyncio
import io
import json
import shlex
import socket
import time
import wave
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from aiohttp import web
from aiohttp.test_utils import TestServer

from router.app import create_app
from router.appkeys import RUNTIMES
from router.config import PROGRAM_SECTIONS, Settings
from router.edge import listener
from router.runtime import RuntimeManager
from tests.fakes.wrappers import _write_script, write_fake_binary
from tests.support.proctree import survivors


class RouterHarness:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.kcpps_dir = tmp / "kcpps"
        self.models_dir = tmp / "models"
        self.bin_dir = tmp / "bin"
        for folder in (self.kcpps_dir, self.models_dir, self.bin_dir):
            folder.mkdir(parents=True, exist_ok=True)
        self.faults: dict[str, str] = {}
        self.faults_for_model: dict[str, str] = {}
        self.wrap: dict[str, str] = {}
        self.programs: dict[str, Path] = {}
        self.extra_args: dict[str, list[str]] = {}
        self.server: TestServer | None = None
        self.app: web.Application | None = None
        self.client: httpx.AsyncClient | None = None

    def model(self, model_id: str, mode: str = "llama_sdcpp", **fields: Any) -> Path:
        """A .kcpps with a text model file (an empty file: the fake backend does not read it)."""
        body: dict[str, Any] = {"backend_mode": mode}
        if not any(
            k in fields for k in ("model_param", "sdmodel", "whispermodel", "embeddingsmodel")
        ):
            fields["model_param"] = f"{model_id}.gguf"
        for key, value in fields.items():
            if key in ("model_param", "sdmodel", "whispermodel", "embeddingsmodel") and value:
                (self.models_dir / value).write_bytes(b"GGUF")
                value = str(self.models_dir / value)
            body[key] = value
        path = self.kcpps_dir / f"{model_id}.kcpps"
        path.write_text(json.dumps(body))
        return path

    def settings(self, **runtime: Any) -> Settings:
        sections: dict[str, Any] = {}
        for family, section in PROGRAM_SECTIONS.items():
            binary = self.programs.get(family) or self.binary(family)
            env = {"FAKE_BACKEND": self.faults[family]} if family in self.faults else {}
            sections[section] = {"binary_path": binary, "env": env}
            if family in self.extra_args:
                sections[section]["extra_args"] = list(self.extra_args[family])
        return Settings.model_validate(
            {
                "security": {"profile": "trusted_lan"},
                "models": {"config_dir": self.kcpps_dir},
                "analytics": {"database_path": self.tmp / "data" / "router.sqlite"},
                "runtime": {
                    # The tests written for one runtime per lane keep testing exactly that;
                    # tests of several per lane ask for `residency="memory"` (the default).
                    "residency": "lane",
                    "stop_grace": 3,
                    "load_timeout": 20,
                    "no_progress_timeout": 10,
                    **runtime,
                },
                **sections,
            }
        )

    def binary(self, family: str) -> Path:
        """The family's binary_path: the fake backend, maybe behind a dispatcher and a wrapper."""
        binary = write_fake_binary(self.bin_dir, family)
        if self.faults_for_model:
            cases = "".join(
                f"    {shlex.quote(model_id)}.*) extra+=({switches}) ;;\n"
                for model_id, switches in self.faults_for_model.items()
            )
            binary = _write_script(
                self.bin_dir / f"dispatch-{family}",
                'extra=()\nfor a in "$@"; do\n  case "${a##*/}" in\n'
                + cases
                + "  esac\ndone\n"
                + f'exec {shlex.quote(str(binary))} "${{extra[@]}}" "$@"',
            )
        kind = self.wrap.get(family)
        if kind == "fork":
            binary = _write_script(
                self.bin_dir / f"fork-{family}", f'{shlex.quote(str(binary))} "$@" &\nwait $!'
            )
        elif kind == "setsid":
            binary = _write_script(
                self.bin_dir / f"setsid-{family}",
                f'setsid {shlex.quote(str(binary))} "$@" &\nwait $!',
            )
        return binary

    async def start(
        self, settings: Settings | None = None, *, middlewares: Sequence[Any] = ()
    ) -> httpx.AsyncClient:
        """`middlewares`: test-only ones, innermost (after auth; tests/support/callers.py)."""
        settings = settings or self.settings()
        self.app = create_app(settings)
        self.app.middlewares.extend(middlewares)
        self.server = TestServer(
            self.app,
            host="127.0.0.1",
            handler_cancellation=True,
            **listener.runner_kwargs(settings),
        )
        await self.server.start_server()
        self.client = httpx.AsyncClient(base_url=str(self.server.make_url("")), timeout=30)
        return self.client

    @property
    def runtimes(self) -> RuntimeManager:
        assert self.app is not None
        return self.app[RUNTIMES]

    def backend_pids(self) -> list[int]:
        return [rt.process.pid for rt in self.runtimes.runtimes() if rt.process and rt.process.pid]

    async def close(self) -> None:
        if self.client is not None:
            await self.client.aclose()
            self.client = None
        if self.server is not None:
            await self.server.close()
            self.server = None

    def records(self, path: Path) -> list[dict[str, Any]]:
        """The lines a fake backend wrote with --record-requests."""
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


async def harness_fixture(tmp_path: Path) -> AsyncIterator[RouterHarness]:
    """Body of the per-file `harness` fixture: closes the router, then no backend may survive."""
    h = RouterHarness(tmp_path)
    try:
        yield h
    finally:
        await h.close()
        left = await survivors()
        assert left == [], f"a backend process outlived the router: {left}"


@dataclass
class SseEvent:
    event: str  # the `event:` field, "message" when absent
    data: str
    at: float  # time.monotonic() when the event's last line arrived


async def iter_sse(lines: AsyncIterator[str]) -> AsyncIterator[SseEvent]:
    """The events of an SSE body as a client dispatches them: an event counts once its blank
    line arrives, and what follows the last blank line is dropped, as EventSource and the
    OpenAI client drop it (so an unterminated error event is no terminal error)."""
    kind, data = "message", []
    async for line in lines:
        if line == "":
            if data or kind != "message":
                yield SseEvent(kind, "\n".join(data), time.monotonic())
            kind, data = "message", []
        elif line.startswith("event:"):
            kind = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].lstrip())


async def read_sse(response: httpx.Response) -> list[SseEvent]:
    """A streamed SSE body's events (iter_sse); each is stamped when its blank line arrives."""
    return [event async for event in iter_sse(response.aiter_lines())]


def vision_model(h: RouterHarness, model_id: str) -> None:
    """A text model with a projector: image requests may go to it (a guardian)."""
    h.model(model_id, model_param=f"{model_id}.gguf")
    projector = h.models_dir / f"{model_id}-proj.gguf"
    projector.write_bytes(b"GGUF")
    path = h.kcpps_dir / f"{model_id}.kcpps"
    body = json.loads(path.read_text())
    path.write_text(json.dumps({**body, "mmproj": str(projector)}))


def chat(model: str, *, stream: bool = False, **extra: Any) -> dict[str, Any]:
    """A one-message chat completion body; `extra` adds fields (`max_tokens=8`)."""
    return {
        "model": model,
        "messages": [{"role": "user", "content": "hi"}],
        "stream": stream,
        **extra,
    }


async def stream_chat(
    client: httpx.AsyncClient, body: Mapping[str, Any], started: asyncio.Event | None = None
) -> tuple[int, list[SseEvent]]:
    """POST a chat completion and read its stream to the end; `started` is set once the
    response headers arrived (for tests that act while the stream is running)."""
    async with client.stream("POST", "/v1/chat/completions", json=body) as r:
        if started is not None:
            started.set()
        return r.status_code, await read_sse(r)


async def wait_for(predicate: Callable[[], object], deadline: float = 2.0) -> bool:
    """Whether `predicate` came true within `deadline` seconds. It reads state a background
    task or another process changes, which offers no event to await, so it is polled."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if predicate():
            return True
        await asyncio.sleep(0.02)
    return bool(predicate())


async def until(read: Callable[[], Awaitable[object]], want: object, deadline: float = 20) -> bool:
    """Poll `read()` until it returns `want` (state another process
    changes on its own clock, read through its API)."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if await read() == want:
            return True
        await asyncio.sleep(0.05)
    return await read() == want


async def wait_http(url: str, deadline: float = 10.0) -> None:
    """Until `url` answers 200: a server that is starting refuses or fails connections."""
    end = time.monotonic() + deadline
    async with httpx.AsyncClient() as client:
        while time.monotonic() < end:
            try:
                if (await client.get(url, timeout=1)).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.02)
    raise AssertionError(f"{url} never answered 200 within {deadline} s")


def wait_until(predicate: Any, what: str, seconds: float = 30.0) -> None:
    """From a thread that must not run an event loop (the browser tests): poll until
    `predicate()` holds."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def free_port() -> int:
    """A loopback port nothing listens on now (the caller binds it soon after)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# One request's record as Recorder.record hands it to Store.record_raw, in rows.Raw's order.
RAW_DEFAULTS: Mapping[str, Any] = {
    "wall": 1_764_400_000.0,
    "route": "/v1/chat/completions",
    "surface": "openai",
    "lane": "text",
    "model": "m1",
    "node_id": "n1",
    "backend": "llamacpp",
    "status": 200,
    "upstream_status": 200,
    "error": None,
    "queue_wait_ms": 0.5,
    "ttfb_ms": 1.25,
    "duration_s": 0.0125,
    "bytes_in": 0,
    "bytes_out": 0,
    "aborted": False,
    "tail": b"",
}


def raw_record(**fields: Any) -> tuple[Any, ...]:
    unknown = fields.keys() - RAW_DEFAULTS.keys()
    if unknown:
        raise TypeError(f"not a field of rows.Raw: {sorted(unknown)}")
    return tuple({**RAW_DEFAULTS, **fields}.values())


def wav_bytes(seconds: float = 0.1) -> bytes:
    """Silent mono 16-bit PCM at 16 kHz."""
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(bytes(2 * int(16000 * seconds)))
    return buf.getvalue()
