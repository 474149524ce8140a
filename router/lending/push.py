"""The master pushes its lending state to its slaves (docs/lending.md): the resolved lending
settings and the whole link table, to every registered slave after a change, and to one slave
each time it registers (so a slave that restarted gets them again within `sync_interval`).

One task sends; callers only mark what is due (`everyone`, `node`) and never wait. The bodies
are built when a push is sent, not when it is asked for, so a burst of changes sends the last
state once, and a slower push can never overwrite a newer one. A slave that is down is skipped
(it is pushed on its next registration); a failed push is logged, not retried.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from typing import Any

from router.cluster import ClusterService, NodeEntry
from router.errors import RouterError

log = logging.getLogger(__name__)

SETTINGS_PATH = "/router/v1/node/offload/settings"
LINKS_PATH = "/router/v1/node/routing-links"

Payloads = Callable[[], Sequence[tuple[str, dict[str, Any]]]]


class Pusher:
    def __init__(self, payloads: Payloads, service: Callable[[], ClusterService | None]) -> None:
        self._payloads = payloads
        self._service = service
        self._due: set[str] = set()
        self._all = False
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.sent = 0  # pushes that a slave accepted (for the tests and the log)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="lending-push")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def everyone(self) -> None:
        """Something changed: push to every registered slave."""
        self._all = True
        self._wake.set()

    def node(self, node_id: str) -> None:
        """`node_id` (re)registered: push to it."""
        self._due.add(node_id)
        self._wake.set()

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            due, everyone = self._due, self._all
            self._due, self._all = set(), False
            service = self._service()
            if service is None:
                continue
            entries = [
                e
                for e in service.registry.nodes()
                if e.node_id and e.healthy and (everyone or e.node_id in due)
            ]
            await asyncio.gather(*(self._push(service, e) for e in entries))

    async def _push(self, service: ClusterService, entry: NodeEntry) -> None:
        for path, body in self._payloads():
            try:
                await service.client.call("POST", entry.node_url, path, body)
            except RouterError as err:
                log.info("lending push to %s (%s) failed: %s", entry.node_id, path, err.message)
                return
            except Exception:  # the push task must outlive one bad answer
                log.exception("lending push to %s (%s) failed", entry.node_id, path)
                return
            self.sent += 1
