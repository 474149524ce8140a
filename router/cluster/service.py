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
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass

from pydantic import ValidationError

from router.cluster.client import NodeClient, PeerError
from router.cluster.fit import Fit, fit_of
from router.cluster.identity import PublicModel, Replica, merge
from router.cluster.local import snapshot
from router.cluster.memory import NodeMemory
from router.cluster.protocol import DeviceMemory, NodeModel, RuntimeStatus, Snapshot
from router.cluster.registry import NodeEntry, Registry
from router.cluster.replicas import affine, choose_replica
from router.config.schema import ClusterSection
from router.conversations import held_length
from router.errors import NotFound, RouterError

log = logging.getLogger(__name__)

MODELS_PATH = "/router/v1/node/models"
REGISTER_PATH = "/router/v1/node/register"
STATUS_PATH = "/router/v1/node/runtime-status"
# Follow-up ids remembered (sd-server jobs, stored responses); the oldest are forgotten first.
MAX_PINS = 10_000
# Placement asks every capable node; one that is slow to say how busy it is is left out.
STATUS_TIMEOUT = 2.0


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
        read_memory: Callable[[], Awaitable[NodeMemory]] | None = None,
    ) -> None:
        self.settings = cluster
        # This node's last memory reading (router/cluster/memory.py): its snapshot carries it.
        self.memory = NodeMemory()
        self._read_memory = read_memory
        self.client = client
        self.registry = Registry(cluster.node_id, cluster.public_url, cluster.slave_urls)
        self._local_models = local_models
        self._on_fatal = on_fatal
        self._turns: dict[str, int] = {}
        self._view: _View | None = None
        self._stt_turn = 0
        self._embeddings_turn = 0
        self._pins: OrderedDict[str, tuple[str, str]] = OrderedDict()
        self.pending: dict[str, int] = {}
        self._generation = 0
        self._rebuild: asyncio.Task[None] | None = None
        self.last_registration: float | None = None
        self.registration_error: str | None = None
        # Who follows a node's (re)registration (lending pushes its state to it): the owner
        # of each follow-up subscribes here rather than the handler calling each of them.
        self.on_registered: list[Callable[[str], None]] = []
        for url in cluster.slave_urls:
            client.allowed.add(url)
        if cluster.master_url:
            client.allowed.add(cluster.master_url)

    @property
    def role(self) -> str:
        return self.settings.role

    def named_node(self, node_id: str) -> NodeEntry | None:
        """The node a site call names: None for this node ("" = none named); on a master the
        registered node's entry; NotFound for any other id (the dispatcher's question, before
        the handler runs: router/api/node/site_relay.py)."""
        if not node_id or node_id == self.settings.node_id:
            return None
        entry = self.registry.node(node_id) if self.role == "master" else None
        if entry is None:
            raise NotFound(f"unknown node {node_id[:64]!r}", param="node_id")
        return entry

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

    async def refresh_memory(self) -> NodeMemory:
        """Read this node's memory again (kept when the reading fails: logged)."""
        if self._read_memory is not None:
            try:
                self.memory = await self._read_memory()
            except Exception:
                log.exception("reading this node's memory for its snapshot failed")
        return self.memory

    def own_snapshot(self, node_url: str) -> Snapshot:
        """What this node tells the cluster (after `refresh_memory`)."""
        models = self._local_models()
        return snapshot(self.settings.node_id, node_url, models, self.memory.devices)

    async def poll_once(self) -> None:
        await self.refresh_memory()  # the master's own replicas are placed on it too
        gate = asyncio.Semaphore(self.settings.sync_concurrency)

        async def poll(url: str) -> None:
            async with gate:
                await self._poll(url)

        await asyncio.gather(*(poll(u) for u in self.registry.slave_urls))
        self.changed()  # one rebuild per round, whatever changed in it

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
            return
        entry = self.registry.polled(url, snap, now)
        if not entry.healthy:
            log.warning("cluster node at %s refused: %s", url, entry.error)

    async def register_once(self) -> bool:
        """One registration; False when the master refused this node's identity for good."""
        assert self.settings.master_url is not None and self.settings.public_url is not None
        await self.refresh_memory()
        snap = self.own_snapshot(self.settings.public_url)
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

    def register(self, snap: Snapshot, now: float) -> None:
        """A master takes a slave's registration: the registry, the merged list, then each
        subscriber (`on_registered`) in the order they subscribed."""
        self.registry.register(snap, now)
        self.changed()
        for follow in self.on_registered:
            follow(snap.node_id)

    def local_models(self) -> tuple[NodeModel, ...]:
        return self._local_models()

    def public_models(self) -> list[PublicModel]:
        """The merged list as of the last change (built once before the first read)."""
        if self._view is None:
            models = self.registry.public_models(self._local_models())
            self._view = _View.of(models, self.registry, self.memory.devices)
        return self._view.models

    def find(self, public_id: str) -> PublicModel | None:
        self.public_models()
        assert self._view is not None
        return self._view.index.get(public_id)

    def changed(self) -> None:
        """The registry changed: rebuild the merged list off the request path.

        Merging 50 nodes x 200 models takes tens of milliseconds; it runs in a thread, and
        requests keep reading the previous list until the new one is swapped in.
        """
        self._generation += 1
        if self._rebuild is None or self._rebuild.done():
            self._rebuild = asyncio.get_running_loop().create_task(self._rebuilt())

    async def _rebuilt(self) -> None:
        while True:
            generation = self._generation
            inputs = self.registry.merge_inputs(self._local_models())
            merged = await asyncio.to_thread(merge, self.registry.own_node, inputs)
            self._view = _View.of(merged, self.registry, self.memory.devices)
            if generation == self._generation:
                return

    async def runtime_statuses(self, node_ids: list[str]) -> dict[str, RuntimeStatus | None]:
        """Each node's load now (None for one that does not answer within STATUS_TIMEOUT)."""

        async def one(node_id: str) -> RuntimeStatus | None:
            entry = self.registry.node(node_id)
            if entry is None:
                return None
            try:
                async with asyncio.timeout(STATUS_TIMEOUT):
                    body = await self.client.call("GET", entry.node_url, STATUS_PATH)
                return RuntimeStatus.model_validate(body)
            except (TimeoutError, RouterError, ValidationError):
                return None

        answers = await asyncio.gather(*(one(n) for n in node_ids))
        return dict(zip(node_ids, answers, strict=True))

    def pin(self, key: str, node_id: str, local_id: str) -> None:
        """Remember which node made a job or a stored response; its follow-ups go there."""
        self._pins[key] = (node_id, local_id)
        self._pins.move_to_end(key)
        while len(self._pins) > MAX_PINS:
            self._pins.popitem(last=False)

    def pinned(self, key: str) -> tuple[str, str] | None:
        return self._pins.get(key)

    def unpin(self, key: str) -> None:
        self._pins.pop(key, None)

    def stt_turn(self) -> int:
        self._stt_turn += 1
        return self._stt_turn

    def embeddings_turn(self) -> int:
        """The rotation counter of selectorless embeddings (`choose_embedding_runtime`)."""
        self._embeddings_turn += 1
        return self._embeddings_turn

    @contextlib.contextmanager
    def reserved(self, node_id: str) -> Iterator[None]:
        """Counts a placed request against its node until it ends, so requests placed before
        that node's next status do not all pile onto it."""
        self.pending[node_id] = self.pending.get(node_id, 0) + 1
        try:
            yield
        finally:
            self.pending[node_id] -= 1

    def node_failed(self, node_url: str, reason: str) -> None:
        """A relayed request could not reach the node or lost it mid-answer (R33)."""
        self.registry.poll_failed(node_url, reason, time.time())
        self.changed()

    def target(
        self,
        public: PublicModel,
        local_busy: bool,
        chain: Sequence[str] = (),
        local_load: int = 0,
    ) -> Target | None:
        """The replica a request for `public` goes to: where its conversation's prefix is
        (`chain`, its digests; replicas.affine), else replicas.choose_replica's order: by
        memory first, from what each node's snapshot said (router/cluster/fit.py)."""
        view = self._view
        assert view is not None
        remote = view.remote.get(public.public_id, ())
        turn = self._turns.get(public.public_id, 0)

        def fit(replica: Replica) -> Fit:
            return fit_of(replica.model, view.devices.get(replica.node_id, ()))

        def load(replica: Replica) -> int:
            return local_load if replica.local else self.pending.get(replica.node_id, 0)

        local = public.local
        everyone = [*([local] if local is not None else []), *remote]
        held = affine(everyone, lambda r: held_length(chain, r.model.prefixes), load)
        chosen = held or choose_replica(local, local_busy, remote, turn, fit)
        if chosen is None:
            return None
        if not chosen.local and held is None:
            self._turns[public.public_id] = turn + 1
        return Target(public, chosen, view.urls.get(chosen.node_id))


@dataclass(frozen=True, slots=True)
class _View:
    """One consistent merged picture: the list, an index, each model's available remote
    replicas and each node's URL (what a request's choice needs, precomputed)."""

    models: list[PublicModel]
    index: dict[str, PublicModel]  # public IDs and public image IDs
    remote: dict[str, tuple[Replica, ...]]
    urls: dict[str, str]
    devices: dict[str, tuple[DeviceMemory, ...]]  # each node's memory, this one's included

    @classmethod
    def of(
        cls, models: list[PublicModel], registry: Registry, own: tuple[DeviceMemory, ...] = ()
    ) -> _View:
        images = {m.public_image_id: m for m in models if m.public_image_id}
        nodes = [e for e in registry.nodes() if e.node_id]
        return cls(
            models,
            images | {m.public_id: m for m in models},
            {m.public_id: m.available_remote() for m in models},
            {e.node_id: e.node_url for e in nodes},
            {e.node_id: e.devices for e in nodes} | {registry.own_node: own},
        )


async def run_cluster(service: ClusterService) -> None:
    with contextlib.suppress(asyncio.CancelledError):
        await service.run()
