"""The registry: the one owner of what every node has and whether it answers.

Registration and polling both land here; callers never read a node's state and then decide to
change it (they call `register`, `polled`, `poll_failed`). Time comes in as an argument so the
rules are tested without a clock.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from router.cluster.identity import PublicModel, merge
from router.cluster.protocol import DeviceMemory, NodeModel, Snapshot, protocol_problem
from router.cluster.urls import normalize_base_url
from router.errors import ClusterError, DuplicateNode
from router.fields import pick


@dataclass(slots=True)
class NodeEntry:
    node_id: str
    node_url: str
    models: tuple[NodeModel, ...] = ()
    healthy: bool = False
    last_contact: float | None = None
    error: str | None = None
    registered: bool = False
    devices: tuple[DeviceMemory, ...] = ()  # its memory ledger, as its snapshot said

    def view(self) -> dict[str, object]:
        plain = pick(self, "node_id", "node_url", "healthy", "last_contact", "error")
        return plain | {"models": len(self.models)}


@dataclass(slots=True)
class Registry:
    """What the master knows of its slaves (a slave's registry holds only itself)."""

    own_node: str
    own_url: str | None
    slave_urls: tuple[str, ...] = ()
    _by_url: dict[str, NodeEntry] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.slave_urls = tuple(normalize_base_url(u) for u in self.slave_urls)
        if self.own_url is not None:
            self.own_url = normalize_base_url(self.own_url)

    def register(self, snapshot: Snapshot, now: float) -> NodeEntry:
        """Accept a slave's snapshot, or raise without changing anything."""
        url = self._configured_url(snapshot.node_url)
        self._check_identity(snapshot.node_id, url)
        problem = protocol_problem(snapshot.protocol, peer=f"node {snapshot.node_id}")
        if problem is not None:
            raise ClusterError(problem, code="protocol_mismatch")
        entry = self._by_url.get(url) or NodeEntry(snapshot.node_id, url)
        entry.node_id, entry.models, entry.registered = snapshot.node_id, snapshot.models, True
        entry.devices = snapshot.devices
        entry.healthy, entry.last_contact, entry.error = True, now, None
        self._by_url[url] = entry
        return entry

    def polled(self, url: str, snapshot: Snapshot, now: float) -> NodeEntry:
        """A good poll of a configured slave; its stored URL stays the configured one."""
        configured = self._configured_url(url)
        try:
            self._check_identity(snapshot.node_id, configured)
        except DuplicateNode as err:
            return self.poll_failed(configured, err.message, now)
        problem = protocol_problem(snapshot.protocol, peer=f"node {snapshot.node_id}")
        if problem is not None:
            return self.poll_failed(configured, problem, now)
        entry = self._by_url.get(configured) or NodeEntry(snapshot.node_id, configured)
        entry.node_id, entry.models, entry.devices = (
            snapshot.node_id,
            snapshot.models,
            snapshot.devices,
        )
        entry.healthy, entry.last_contact, entry.error = True, now, None
        self._by_url[configured] = entry
        return entry

    def poll_failed(self, url: str, reason: str, now: float) -> NodeEntry:
        configured = self._configured_url(url)
        entry = self._by_url.get(configured) or NodeEntry("", configured)
        entry.healthy, entry.error = False, reason
        self._by_url[configured] = entry
        return entry

    def _configured_url(self, url: str) -> str:
        try:
            base = normalize_base_url(url)
        except ValueError as err:
            raise ClusterError(str(err)) from None
        if base not in self.slave_urls:
            raise ClusterError(f"{base} is not configured in cluster.slave_urls on the master")
        return base

    def _check_identity(self, node_id: str, url: str) -> None:
        if node_id == self.own_node:
            raise DuplicateNode(f"node id {node_id!r} is the master's own node id")
        if url == self.own_url:
            raise DuplicateNode(f"{url} is the master's own URL")
        for other in self._by_url.values():
            if other.node_url == url and other.node_id not in ("", node_id):
                raise DuplicateNode(f"{url} already belongs to node {other.node_id!r}")
            if other.node_id == node_id and other.node_url != url:
                raise DuplicateNode(f"node id {node_id!r} is already registered from another URL")

    def node(self, node_id: str) -> NodeEntry | None:
        return next((e for e in self._by_url.values() if e.node_id == node_id), None)

    def nodes(self) -> list[NodeEntry]:
        return sorted(self._by_url.values(), key=lambda e: (e.node_id, e.node_url))

    def public_models(self, own_models: Iterable[NodeModel]) -> list[PublicModel]:
        """Every node's records merged; an unhealthy node's models are kept but unavailable."""
        return merge(self.own_node, self.merge_inputs(own_models))

    def merge_inputs(
        self, own_models: Iterable[NodeModel]
    ) -> list[tuple[str, tuple[NodeModel, ...]]]:
        """What `merge` reads, copied now (the merge itself may then run in another thread)."""
        pairs: list[tuple[str, tuple[NodeModel, ...]]] = [(self.own_node, tuple(own_models))]
        for entry in self.nodes():
            if not entry.node_id:
                continue
            models = entry.models
            if not entry.healthy:
                models = tuple(m.model_copy(update={"available": False}) for m in models)
            pairs.append((entry.node_id, models))
        return pairs
