"""R9: a hung backend and its replacement are never alive together (issue 24).

The backend hangs mid-stream and ignores SIGTERM, so stopping it takes the whole `stop_grace`
and a SIGKILL. A request that arrives meanwhile must wait for the replacement, and the
replacement's process must not start until the hung one has exited: memory sized for one copy
of a model (a GPU) would otherwise fail the reload.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import psutil

from tests.support.harness import RouterHarness, chat, stream_chat

GRACE = 1.5


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


async def test_r9_the_replacement_of_a_hung_backend_starts_after_it_has_exited(
    harness: RouterHarness, tmp_path: Path
) -> None:
    harness.model("chat-a")
    harness.faults["llamacpp"] = "--hang-after-tokens 3 --token-rate 50 --ignore-sigterm"
    settings = harness.settings(stream_idle_timeout=0.6, stop_grace=GRACE)
    client = await harness.start(settings)
    assert (await client.post("/router/v1/load", json={"model": "chat-a"})).status_code == 200
    (hung,) = harness.runtimes.runtimes()
    assert hung.process is not None and hung.process.pid is not None
    hung_pid = hung.process.pid

    overlap: list[tuple[int, int]] = []
    replacement: set[int] = set()
    stop = asyncio.Event()

    async def watch() -> None:
        # Sampled every 10 ms: an overlap would last up to the whole grace (1.5 s).
        while not stop.is_set():
            for rt in harness.runtimes.runtimes():
                pid = rt.process.pid if rt.process else None
                if pid and pid != hung_pid and _alive(pid):
                    replacement.add(pid)
                    if _alive(hung_pid):
                        overlap.append((hung_pid, pid))
            await asyncio.sleep(0.01)

    watcher = asyncio.create_task(watch())
    status, _ = await stream_chat(client, chat("chat-a", stream=True, max_tokens=10))
    assert status == 200
    # The stream ended at the idle deadline; the hung process is now being stopped (TERM
    # ignored, KILL at the grace). This request needs the model again at once.
    asked = time.monotonic()
    r = await client.post("/v1/chat/completions", json=chat("chat-a", max_tokens=2))
    served_after = time.monotonic() - asked
    stop.set()
    await watcher
    assert r.status_code == 200, r.text
    new_pid = int(r.headers["x-fake-pid"])
    assert new_pid != hung_pid
    assert not _alive(hung_pid)
    assert overlap == [], f"the hung backend and its replacement ran together: {overlap[:3]}"
    # It waited for the KILL at the grace rather than failing or racing ahead.
    assert served_after >= GRACE * 0.5, f"served {served_after:.2f}s after asking"
    assert harness.runtimes.spawn_count == 2
