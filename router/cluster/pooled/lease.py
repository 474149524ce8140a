"""A pooled-memory lease (docs/cluster.md, "Pooled memory"): one master's permission to use
one node's RPC server for one model, for a number of bytes, until it expires or is released.
Pure: the caller passes `now` (monotonic seconds); each step returns a new lease or raises
LeaseRefused naming why, so a node never acts on a transition the machine does not allow.

    requested --grant--> granted --renew--> granted
        |                   |--expire--> expired
        +--release-->  released <--release--+
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace

from router.errors import LeaseRefused


class LeaseState(enum.Enum):
    REQUESTED = "requested"
    GRANTED = "granted"
    EXPIRED = "expired"
    RELEASED = "released"


_NEXT = {
    LeaseState.REQUESTED: {LeaseState.GRANTED, LeaseState.RELEASED},
    LeaseState.GRANTED: {LeaseState.GRANTED, LeaseState.EXPIRED, LeaseState.RELEASED},
    LeaseState.EXPIRED: set(),
    LeaseState.RELEASED: set(),
}


def check_transition(old: LeaseState, new: LeaseState) -> None:
    if new not in _NEXT[old]:
        raise LeaseRefused(f"a lease cannot go from {old.value} to {new.value}")


@dataclass(frozen=True)
class RpcLease:
    lease_id: str
    master_id: str
    node_id: str
    model: str
    bytes: int
    ttl_s: float
    state: LeaseState = LeaseState.REQUESTED
    expires: float = 0.0  # monotonic; meaningful once granted
    port: int | None = None  # the RPC server's port once granted

    def live(self, now: float) -> bool:
        return self.state is LeaseState.GRANTED and now < self.expires


def _move(lease: RpcLease, new: LeaseState, **changes: object) -> RpcLease:
    check_transition(lease.state, new)
    return replace(lease, state=new, **changes)  # type: ignore[arg-type]


def _holder(lease: RpcLease, master_id: str) -> None:
    if master_id != lease.master_id:
        raise LeaseRefused(f"lease {lease.lease_id} is held by another master")


def grant(lease: RpcLease, now: float, port: int) -> RpcLease:
    return _move(lease, LeaseState.GRANTED, expires=now + lease.ttl_s, port=port)


def renew(lease: RpcLease, master_id: str, now: float) -> RpcLease:
    """Only the holder renews, and only a lease still live: an expired one stays ended (its
    RPC server is stopped; the master asks for a new lease)."""
    _holder(lease, master_id)
    if lease.state is LeaseState.GRANTED and now >= lease.expires:
        raise LeaseRefused(f"lease {lease.lease_id} expired")
    return _move(lease, LeaseState.GRANTED, expires=now + lease.ttl_s)


def expire(lease: RpcLease, now: float) -> RpcLease:
    if now < lease.expires:
        raise LeaseRefused(f"lease {lease.lease_id} has not expired")
    return _move(lease, LeaseState.EXPIRED)


def release(lease: RpcLease, master_id: str) -> RpcLease:
    _holder(lease, master_id)
    return _move(lease, LeaseState.RELEASED)


__all__ = [
    "LeaseState",
    "RpcLease",
    "check_transition",
    "expire",
    "grant",
    "release",
    "renew",
]
