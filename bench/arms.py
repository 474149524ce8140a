"""The comparison arms other than the router: nginx (proxy_http_version 1.1, upstream
keep-alive, buffering off) and the LiteLLM proxy (one worker, no database, no retries)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import psutil

from bench.common import (
    Proc,
    Router,
    Stack,
    free_port,
    litellm_path,
    log,
    nginx_path,
    skip,
    wait_http,
    write_wrapper,
)
from bench.load import tree
from bench.upstream import nginx_preamble


def nginx_proxy_conf(prefix: Path, port: int, upstream_port: int) -> str:
    return (
        nginx_preamble(prefix)
        + f"""  upstream backend {{ server 127.0.0.1:{upstream_port}; keepalive 32; }}
  server {{
    listen 127.0.0.1:{port};
    location / {{
      proxy_pass http://backend;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_request_buffering off;
      proxy_read_timeout 600s;
    }}
  }}
}}
"""
    )


def start_nginx_proxy(workdir: Path, upstream_port: int) -> tuple[Proc, str]:
    nginx = nginx_path()
    assert nginx
    prefix = workdir / "nginx-proxy"
    prefix.mkdir(parents=True, exist_ok=True)
    port = free_port()
    (prefix / "nginx.conf").write_text(nginx_proxy_conf(prefix, port, upstream_port))
    proc = Proc([nginx, "-p", str(prefix), "-c", str(prefix / "nginx.conf")], "nginx", workdir)
    url = f"http://127.0.0.1:{port}"
    wait_http(f"{url}/health", proc, 20)
    return proc, url


def start_litellm(workdir: Path, upstream_port: int, model: str) -> tuple[Proc, str]:
    """LiteLLM proxy: 1 worker, no DB, num_retries 0, callbacks off, upstream = our backend."""
    exe = litellm_path()
    assert exe
    port = free_port()
    cfg = workdir / "litellm.yaml"
    cfg.write_text(
        "model_list:\n"
        f"  - model_name: {model}\n"
        "    litellm_params:\n"
        f"      model: openai/{model}\n"
        f"      api_base: http://127.0.0.1:{upstream_port}/v1\n"
        "      api_key: sk-bench-unused\n"
        "litellm_settings:\n"
        "  num_retries: 0\n"
        "  request_timeout: 600\n"
        "  callbacks: []\n"
        "  success_callback: []\n"
        "  failure_callback: []\n"
        "  telemetry: false\n"
        "  drop_params: true\n"
        "general_settings:\n"
        "  disable_spend_logs: true\n"
        "  disable_error_logs: true\n"
        # no master key: the router arm checks no key either (trusted_lan)
        "  dangerously_permit_weak_or_unset_master_key: true\n"
    )
    env = dict(os.environ)
    for var in ("DATABASE_URL", "LITELLM_MASTER_KEY", "REDIS_HOST", "REDIS_URL"):
        env.pop(var, None)
    env.update(
        LITELLM_LOCAL_MODEL_COST_MAP="True",
        LITELLM_TELEMETRY="False",
        LITELLM_LOG="ERROR",
        NO_PROXY="127.0.0.1,localhost",
        DISABLE_SCHEMA_UPDATE="true",
    )
    argv = [exe, "--config", str(cfg), "--host", "127.0.0.1", "--port", str(port)]
    argv += ["--num_workers", "1"]
    proc = Proc(argv, "litellm", workdir, env=env)
    url = f"http://127.0.0.1:{port}"
    wait_http(f"{url}/health/liveliness", proc, 180)
    return proc, url


@dataclass
class Arms:
    """The four arms over one upstream process: direct, router, nginx, litellm."""

    urls: dict[str, str]  # arm -> base URL
    cpu_procs: dict[str, list[psutil.Process]]  # arm -> processes whose CPU the arm costs
    backend_procs: list[psutil.Process]
    skipped: dict[str, str]
    router: Router
    backend_argv: list[str]


def start_arms(
    stack: Stack, wd: Path, mode: str, *, analytics: bool = False, with_proxies: bool = True
) -> Arms:
    """Router launches the upstream (`mode` of bench/upstream.py); the others reuse its port."""
    model = wd / "fast.gguf"
    model.write_bytes(b"GGUF-bench")
    wrapper = write_wrapper(wd / f"upstream-{mode}", mode)
    router = Router(wd / "router", {"fast": model}, wrapper, analytics=analytics)
    stack.callback(router.stop)
    router.start()
    router.load("fast")
    rt = router.backend("fast")
    bport, bpid = int(rt["port"]), int(rt["pid"])
    backend = tree(bpid)
    argv = backend[0].cmdline() if backend else []
    assert router.proc is not None
    urls = {"direct": f"http://127.0.0.1:{bport}", "router": router.url}
    cpu: dict[str, list[psutil.Process]] = {
        "direct": [],
        "router": tree(router.proc.pid, exclude={bpid}),
    }
    skipped: dict[str, str] = {}
    if with_proxies:
        if nginx_path():
            proc, url = start_nginx_proxy(wd, bport)
            stack.proc(proc)
            urls["nginx"], cpu["nginx"] = url, tree(proc.pid)
        else:
            skipped["nginx"] = skip("nginx", "nginx")
        if litellm_path():
            try:
                proc, url = start_litellm(wd, bport, "fast")
                stack.proc(proc)
                urls["litellm"], cpu["litellm"] = url, tree(proc.pid)
            except RuntimeError as exc:
                skipped["litellm"] = f"arm skipped: LiteLLM did not start: {str(exc)[-300:]}"
                log(skipped["litellm"])
        else:
            skipped["litellm"] = skip("litellm", "litellm")
    return Arms(urls, cpu, backend, skipped, router, argv)
