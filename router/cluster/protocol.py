"""What nodes say to each other: the snapshot a slave registers and the master polls.

The wire shape is pydantic so a peer's body is validated once at the edge. Unknown fields are
ignored (a newer peer may add some); the protocol number is what refuses a peer that changed the
meaning of a field, with a message saying which side to update.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from router.domain import Lane

# Raised when the meaning of a snapshot field changes; MIN is the oldest this build still reads.
PROTOCOL_VERSION = 1
MIN_PROTOCOL_VERSION = 1


class _Wire(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class DeviceMemory(_Wire):
    """One device of a node as its GET /router/v1/status `devices` row says (issue 25)."""

    device: str = Field(min_length=1, max_length=64)
    kind: str = "host"
    budget: int = Field(default=0, ge=0)
    used: int = Field(default=0, ge=0)
    free: int = Field(default=0, ge=0)


class RuntimeMemory(_Wire):
    """What a configuration's runtime holds on its node now, as the status's `memory`."""

    device: str = Field(min_length=1, max_length=64)
    bytes: int = Field(ge=0)
    source: str = "estimate"


class NodeModel(_Wire):
    """One configuration as its node reports it, under the node's own (local) IDs."""

    local_id: str = Field(min_length=1, max_length=256)
    local_image_id: str | None = None
    filename: str | None = None
    lanes: tuple[Lane, ...] = ()
    backend_mode: str | None = None
    family: str | None = None
    model_hash: str | None = None
    config_hash: str | None = None
    capabilities: tuple[str, ...] = ()
    context_length: int | None = None  # the stated context window (lending eligibility)
    parallel: int | None = None  # the stated parallel slots (lending needs one)
    multimodal: bool = False
    available: bool = True
    loaded: bool = False
    disabled: bool = False
    created: int = 0
    # Newer (issue 25; an older peer sends neither): the memory its runtime holds (None: not
    # resident), and the bytes per device a load would hold, as the node's dry run says.
    memory: RuntimeMemory | None = None
    estimate: dict[str, int] | None = None
    # Newer still: the node's own verdict from that dry run (True: a load would stop another
    # runtime first, or wait for one to drain; None: not said, the master does the arithmetic).
    evicts: bool | None = None
    # Newer (issue 33): the conversation prefixes this configuration holds or saved here, as
    # `<units>:<digest>` (router/conversations), so a returning conversation comes back here.
    prefixes: tuple[str, ...] = Field(default=(), max_length=64)


class Snapshot(_Wire):
    protocol: int = Field(ge=0)
    node_id: str = Field(min_length=1, max_length=64)
    node_url: str = Field(min_length=1, max_length=2048)
    models: tuple[NodeModel, ...] = ()
    devices: tuple[DeviceMemory, ...] = ()  # newer: the node's memory ledger (issue 25)


class LaneLoad(_Wire):
    """One lane's work on a node: in flight, queued, and how much of it is borrowed."""

    active: int = Field(default=0, ge=0)
    queued: int = Field(default=0, ge=0)
    borrowed: int = Field(default=0, ge=0)


class ModelLoad(_Wire):
    """One configuration's requests on a node: in its backend and queued for it."""

    active: int = Field(default=0, ge=0)
    queued: int = Field(default=0, ge=0)


class CostWire(_Wire):
    """A node's own cost fit of one model on one lane (router/lending/costs.py)."""

    model_id: str = Field(min_length=1, max_length=256)
    lane: str
    job_s: float | None = Field(default=None, ge=0)
    load_s: float | None = Field(default=None, ge=0)
    samples: int = Field(default=0, ge=0)
    fitted: bool = False


class RuntimeStatus(_Wire):
    """A node's load at one moment: what speech-to-text placement and lending read.
    `models` and `costs` are newer (lending's planner); an older peer's status has neither."""

    node_id: str
    active_requests: int = Field(default=0, ge=0)
    queued_requests: int = Field(default=0, ge=0)
    loaded_stt_model: str | None = None
    lanes: dict[str, LaneLoad] = Field(default_factory=dict)
    loaded_models: tuple[str, ...] = ()  # configurations with a ready runtime
    # The lanes each of those holds (selectorless embeddings); None from an older peer.
    ready_lanes: dict[str, tuple[str, ...]] | None = None
    models: dict[str, ModelLoad] = Field(default_factory=dict)
    costs: tuple[CostWire, ...] = ()


def protocol_problem(theirs: int, *, peer: str) -> str | None:
    """None when `theirs` is readable here, else a sentence naming the side to update."""
    if theirs < MIN_PROTOCOL_VERSION:
        return (
            f"{peer} speaks cluster protocol {theirs}; this router needs at least "
            f"{MIN_PROTOCOL_VERSION}: update tensor-router on {peer}"
        )
    if theirs > PROTOCOL_VERSION:
        return (
            f"{peer} speaks cluster protocol {theirs}, newer than this router's "
            f"{PROTOCOL_VERSION}: update tensor-router on this node"
        )
    return None
