"""The cluster at run time: the master polls its slaves, a slave registers with its master.

One task per router (started from the app's cleanup context). A master polls every configured
slave every `health_interval`, at most `sync_concurrency` at once; a slave registers at start and
every `sync_interval`, and stops for good when the master says its identity is taken (409
`duplicate_node`): running on would serve under a name the cluster gives to another box.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from pydantic import ValidationError

from router.cluster.client import NodeClient, PeerError
from router.cluster.identity import PublicModel, Replica
from router.cluster.local import snapshot
from router.cluster.protocol import NodeModel, Snapshot
from router.cluster.registry import Registry
from router.cluster.replicas import ReplicaView, choose_replica
from router.config.schema import ClusterSection
from router.errors import RouterError

log = logging.getLogger(__name__)

MODELS_PATH = "/router/v1/node/models"
REGISTER_PATH = "/router/v1/node/register"
# Local records change with the catalog (2 s poll) and runtime state; a second is fresh enough
# for listings, and the registry's own changes call forget().
CACHE_SECONDS = 1.0


@dataclass(frozen=True, slots=True)
class Target:
    """Where one request goes: this node (`local`), or a replica on a registered node."""

    public: PublicModel
    replica: Replica
    node_url: str | None


class ClusterService:
    def __init__(
        self,
        cluster: ClusterSection,
        client: NodeClient,
        local_models: Callable[[], tuple[NodeModel, ...]],
        on_fatal: Callable[[str], None],
    ) -> None:
        self.settings = cluster
        self.client = client
        self.registry = Registry(cluster.node_id, cluster.public_url, cluster.slave_urls)
        self._local_models = local_models
        self._on_fatal = on_fatal
        self._turns: dict[str, int] = {}
        self._cache: tuple[float, list[PublicModel], dict[str, PublicModel]] | None = None
        self.last_registration: float | None = None
        self.registration_error: str | None = None
        for url in cluster.slave_urls:
            client.allowed.add(url)
        if cluster.master_url:
            client.allowed.add(cluster.master_url)

    @property
    def role(self) -> str:
        return self.settings.role

    async def run(self) -> None:
        if self.role == "master":
            await self._every(self.settings.health_interval, self.poll_once)
        elif self.role == "slave":
            await self._every(self.settings.sync_interval, self.register_once)

    async def _every(self, interval: float, step: Callable[[], Awaitable[object]]) -> None:
        while True:
            try:
                done = await step()
            except Exception:
                log.exception("cluster step failed; retrying in %.0fs", interval)
                done = True
            if done is False:
                return
            await asyncio.sleep(interval)

    async def poll_once(self) -> None:
        gate = asyncio.Semaphore(self.settings.sync_concurrency)

        async def poll(url: str) -> None:
            async with gate:
                await self._poll(url)

        await asyncio.gather(*(poll(u) for u in self.registry.slave_urls))

    async def _poll(self, url: str) -> None:
        now = time.time()
        try:
            body = await self.client.call("GET", url, MODELS_PATH)
            snap = Snapshot.model_validate(body)
        except ValidationError as err:
            self.registry.poll_failed(url, f"bad snapshot: {err.error_count()} problem(s)", now)
            return
        except RouterError as err:
            self.registry.poll_failed(url, err.message, now)
            self.forget()
            return
        entry = self.registry.polled(url, snap, now)
        self.forget()
        if not entry.healthy:
            log.warning("cluster node at %s refused: %s", url, entry.error)

    async def register_once(self) -> bool:
        """One registration; False when the master refused this node's identity for good."""
        assert self.settings.master_url is not None and self.settings.public_url is not None
        snap = snapshot(self.settings.node_id, self.settings.public_url, self._local_models())
        try:
            await self.client.call(
                "POST", self.settings.master_url, REGISTER_PATH, snap.model_dump(mode="json")
            )
        except PeerError as err:
            self.registration_error = err.message
            if err.code in ("duplicate_node", "protocol_mismatch"):
                log.error("the master refused this node for good: %s", err.message)
                self._on_fatal(err.message)
                return False
            log.warning("registration with the master failed: %s", err.message)
            return True
        except RouterError as err:
            self.registration_error = err.message
            log.warning("registration with the master failed: %s", err.message)
            return True
        self.last_registration, self.registration_error = time.time(), None
        return True

    def local_models(self) -> tuple[NodeModel, ...]:
        return self._local_models()

    def public_models(self) -> list[PublicModel]:
        """The merged list; rebuilt at most every CACHE_SECONDS (requests ask it every time)."""
        now = time.monotonic()
        if self._cache is None or now - self._cache[0] > CACHE_SECONDS:
            merged = self.registry.public_models(self._local_models())
            self._cache = (now, merged, {m.public_id: m for m in merged})
        return self._cache[1]

    def find(self, public_id: str) -> PublicModel | None:
        self.public_models()
        assert self._cache is not None
        return self._cache[2].get(public_id)

    def forget(self) -> None:
        """The registry changed: the next read rebuilds the merged list."""
        self._cache = None

    def target(self, public: PublicModel, local_busy: bool) -> Target | None:
        """The replica a request for `public` goes to (replicas.choose_replica's order)."""
        views = [
            ReplicaView(r.node_id, r.local, r.model.available, busy=r.local and local_busy)
            for r in public.replicas
        ]
        turn = self._turns.get(public.public_id, 0)
        chosen = choose_replica(views, turn)
        if chosen is None:
            return None
        if not chosen.local:
            self._turns[public.public_id] = turn + 1
        replica = next(r for r in public.replicas if r.node_id == chosen.node_id)
        entry = None if replica.local else self.registry.node(replica.node_id)
        return Target(public, replica, entry.node_url if entry else None)


async def run_cluster(service: ClusterService) -> None:
    with contextlib.suppress(asyncio.CancelledError):
        await service.run()
