"""`pooled`: this node lending memory over llama.cpp's RPC engine (docs/cluster.md,
"Pooled memory"). Off by default: a node runs no RPC server until it is turned on here and a
master holds a live lease."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, Field, model_validator

from router.config.durations import PositiveDuration
from router.config.section import Section
from router.config.sizes import Size

_DEVICE = r"^(host|gpu\d{1,2})$"


def cluster_address(value: str) -> str:
    """One address of this node (never a wildcard): the RPC server binds only there, so it
    answers only on the cluster's network."""
    try:
        address = ipaddress.ip_address(value)
    except ValueError:
        raise ValueError(f"{value!r}: use this node's IP address on the cluster network") from None
    if address.is_unspecified or address.is_multicast:
        raise ValueError(f"{value!r}: the RPC server must bind one address, never all of them")
    if address.version != 4:  # llama.cpp splits `--rpc host:port` at the first colon
        raise ValueError(f"{value!r}: llama.cpp's RPC endpoints take an IPv4 address")
    return str(address)


class PooledSection(Section):
    # Lend this node's memory to the master's models that span nodes.
    lend: bool = False
    # The address the RPC server binds: this node's address on the cluster network.
    bind: Annotated[str, AfterValidator(cluster_address)] = "127.0.0.1"
    # The RPC servers' ports: a free one of this range per lease, nothing outside it.
    port_min: int = Field(default=50100, ge=1024, le=65535)
    port_max: int = Field(default=50131, ge=1024, le=65535)
    # Where the lent memory lives: `host` (RAM, the CPU device) or `gpu<N>`.
    device: str = Field(default="host", pattern=_DEVICE)
    # At most this much is lent at once, whatever the ledger has free (0: no cap).
    max_bytes: Size = 0
    # The RPC servers' tensor cache (`-c`) in the state folder, pruned to this size.
    cache_budget: Size = 8 << 30
    # A lease ends this long after its last renewal; the master renews at a third of it.
    lease_ttl: PositiveDuration = 30.0
    # This node's own load needs lent memory: the master is asked to unload the model that
    # holds it; past this the node ends the lease itself (the master's runtime then fails).
    reclaim_timeout: PositiveDuration = 30.0
    # The RPC server program; None: `ggml-rpc-server` or `rpc-server` among built backends.
    binary_path: Path | None = None
    threads: int | None = Field(default=None, ge=1, le=512)

    @model_validator(mode="after")
    def _check_range(self) -> PooledSection:
        if self.port_max < self.port_min:
            raise ValueError("port_max must not be below port_min")
        return self


__all__ = ["PooledSection", "cluster_address"]
