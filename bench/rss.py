"""Router memory: RSS (psutil) of the router process alone, idle, analytics on (the default).

Three points: just started (nothing loaded), after loading the fast upstream, and idle again
after 2,000 proxied requests on 32 connections (so pools and caches have filled). Backends are
separate processes and are not counted; the analytics writer helper (store/event_writer.py) is
reported as a point of its own.
"""

from __future__ import annotations

import time
from typing import Any

import psutil

from bench import common as c


def rss(pid: int) -> dict[str, float]:
    p = psutil.Process(pid)
    full = p.memory_full_info()
    return {"rss_mib": full.rss / 2**20, "uss_mib": full.uss / 2**20}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    opts = c.Opts.parse(argv, __doc__ or "")
    mode = "nginx" if c.nginx_path() else "stream"
    points: dict[str, dict[str, float]] = {}
    with c.workdir("rss") as wd, c.Stack() as stack:
        model = wd / "fast.gguf"
        model.write_bytes(b"GGUF-bench")
        up = c.write_wrapper(wd / "up", mode)
        router = c.Router(wd / "router", {"fast": model}, up, analytics=True)
        stack.callback(router.stop)
        router.start()
        assert router.proc is not None
        time.sleep(2)
        points["idle, just started"] = rss(router.proc.pid)
        router.load("fast")
        time.sleep(1)
        points["idle, model loaded"] = rss(router.proc.pid)
        c.load_test(router.url + "/v1/chat/completions", c.CHAT_BODY, 32, 2)
        time.sleep(2)
        points["idle, after load test"] = rss(router.proc.pid)
        for child in psutil.Process(router.proc.pid).children():
            if any("event_writer" in part for part in child.cmdline()):
                points["analytics writer helper (separate process)"] = rss(child.pid)
    for k, v in points.items():
        c.log(f"rss {k}: {v['rss_mib']:.1f} MiB (uss {v['uss_mib']:.1f} MiB)")
    data = {"points": points, "target_mib": 80}
    c.save(opts, "rss", data)
    return data


if __name__ == "__main__":
    main()
