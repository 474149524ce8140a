"""vLLM sleep instead of stop (`.kcpps` `router_sleep: 1`; docs/swaps.md, "vLLM sleep").

A vLLM configuration with `router_sleep` is launched with `--enable-sleep-mode` (and
`VLLM_SERVER_DEV_MODE=1`, which vLLM needs to serve the routes below; backends/vllm.py). When a
swap in its lane would stop it and host memory allows, the router puts it to sleep instead:
`POST /sleep?level=1` moves the weights to host RAM and drops the KV cache, the process stays,
and the lane is free for the next model. When it is wanted again it is woken
(`POST /wake_up`) instead of loaded: seconds instead of a reload (18-200x faster, published
figures in shared/notes/swap-path.md section 3). Level 1 only: level 2 drops the weights,
which is no faster than a load from the page cache.

The router calls these routes itself on the backend's loopback port through the backend
client (router/backend_client); clients never reach them. Every call is bounded
(`runtime.stop_grace` for the sleep, `runtime.load_timeout` for the wake), published as a
`vllm_sleep` event, and a failure is logged and answered by the ordinary path: a sleep that fails
stops the process as the swap would have, a wake that fails stops it and loads afresh.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from router.backend_client import BackendClient, Outcome
from router.config import Settings
from router.domain import Family
from router.memory.host import HostRoom
from router.runtime.hooks import SwapHook
from router.runtime.state import Runtime

log = logging.getLogger(__name__)

SLEEP_LEVEL = 1


def may_sleep(wanted: bool, family: Family, weights: int, room: int) -> bool:
    """Pure: a `router_sleep` vLLM runtime sleeps when its weights (moved to host RAM by a
    level-1 sleep) fit in the host room the memory package grants (router/memory/host.py:
    the ledger's host budget and `memory.reserve`)."""
    return wanted and family is Family.VLLM and weights <= room


def weights_size(path: Path) -> int:
    """Bytes of the model's files: one file, or every file under a model folder."""
    try:
        if path.is_file():
            return path.stat().st_size
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    except OSError:
        return 0


class VllmSleep(SwapHook):
    """The sleep and wake calls; each bounded, each answering True or False, never raising."""

    def __init__(self, settings: Settings, client: BackendClient, host: HostRoom):
        self._settings = settings
        self._client = client
        self._host = host  # the memory package judges host memory, not this module

    def _fit(self, runtime: Runtime) -> tuple[bool, int, int] | None:
        """(may it sleep, bytes of its weights, host room), None for a runtime that never
        sleeps: stats the model's files and asks for host room (cheap)."""
        config = runtime.config
        if not (config.sleep and runtime.spec.family is Family.VLLM and runtime.base_url):
            return None
        model = config.model_file(runtime.spec.lane)
        weights = weights_size(model) if model is not None else 0
        # Asleep, the ledger counts its weights in place of its figure (runtime/holdings.py).
        room = self._host.room(replacing=runtime.key)
        return may_sleep(True, runtime.spec.family, weights, room), weights, room

    def wanted(self, runtime: Runtime) -> bool:
        """Sleep instead of stop? Says so in the log when host memory is what refuses."""
        fit = self._fit(runtime)
        if fit is None:
            return False
        allowed, weights, room = fit
        if not allowed:
            log.info(
                "%s: host memory does not allow a sleep (%d bytes of weights, %d of room)",
                runtime.key,
                weights,
                room,
            )
        return allowed

    async def sleep(self, runtime: Runtime) -> bool:
        url = f"{runtime.base_url}/sleep?level={SLEEP_LEVEL}"
        return await self._call(runtime, "sleep", url, True, self._settings.runtime.stop_grace)

    async def wake(self, runtime: Runtime) -> bool:
        url = f"{runtime.base_url}/wake_up"
        return await self._call(runtime, "wake", url, False, self._settings.runtime.load_timeout)

    # ---- the swap hook (router/runtime/hooks.py): a sleep parks, a wake brings back --------

    def parks(self, runtime: Runtime) -> bool:
        return self.wanted(runtime)

    def would_park(self, runtime: Runtime) -> bool:
        fit = self._fit(runtime)
        return fit is not None and fit[0]

    async def park(self, runtime: Runtime) -> bool:
        return await self.sleep(runtime)

    async def unpark(self, runtime: Runtime) -> bool:
        return await self.wake(runtime)

    async def _call(
        self, runtime: Runtime, action: str, url: str, asleep: bool, deadline: float
    ) -> bool:
        """POST the action, then confirm with `GET /is_sleeping` (vLLM may answer the POST
        before the engine has finished); published as a `vllm_sleep` event either way."""

        async def work() -> Outcome:
            await self._client.expect("POST", url)
            await self._until(runtime, asleep)
            return "ok", {}

        done = await self._client.bounded(
            "vllm_sleep", runtime.identity(), action, work, deadline, timeout_result="failed"
        )
        return done is not None

    async def _until(self, runtime: Runtime, asleep: bool) -> None:
        delay = 0.01
        while True:
            reply = await self._client.fetch("GET", runtime.base_url + "/is_sleeping")
            body = reply.json()
            if isinstance(body, dict) and body.get("is_sleeping") is asleep:
                return
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.25)
