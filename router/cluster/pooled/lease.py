"""A pooled-memory lease (docs/cluster.md, "Pooled memory"): one master's permission to use
one node's memory for one model, for a number of bytes, until it expires or is released. Its
kind says what the node runs under it: an RPC server (`rpc`, llama.cpp) or a headless vLLM
follower (`vllm`, one rank of a multi-node gang); both follow the one state machine below.
Pure: the caller passes `now` (monotonic seconds); each step returns a new lease or raises
LeaseRefused naming why, so a node never acts on a transition the machine does not allow.

    requested --grant--> granted --renew--> granted
        |                   |--expire--> expired
        |                   |--reclaim--> reclaiming --renew--> reclaiming
        |                   |                 +--expire or release--> expired or released
        +--release-->  released <--release--+

`reclaiming`: the node needs the memory for its own load and has asked the master to unload
the model; the lease ends at `expires`, brought forward to the reclaim's deadline. A renewal
answers but moves the end no later, so a master that does not unload in time loses the lease
to the node's timer (its next renewal fails: the fault path stops its llama-server).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace

from router.errors import LeaseRefused


class LeaseKind(enum.Enum):
    RPC = "rpc"
    VLLM = "vllm"


class LeaseState(enum.Enum):
    REQUESTED = "requested"
    GRANTED = "granted"
    RECLAIMING = "reclaiming"
    EXPIRED = "expired"
    RELEASED = "released"


_NEXT = {
    LeaseState.REQUESTED: {LeaseState.GRANTED, LeaseState.RELEASED},
    LeaseState.GRANTED: {
        LeaseState.GRANTED,
        LeaseState.RECLAIMING,
        LeaseState.EXPIRED,
        LeaseState.RELEASED,
    },
    LeaseState.RECLAIMING: {LeaseState.RECLAIMING, LeaseState.EXPIRED, LeaseState.RELEASED},
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
    port: int | None = None  # the RPC server's port once granted (none for a vLLM follower)
    kind: LeaseKind = LeaseKind.RPC

    def live(self, now: float) -> bool:
        return self.state in _HELD and now < self.expires


_HELD = (LeaseState.GRANTED, LeaseState.RECLAIMING)


def _move(lease: RpcLease, new: LeaseState, **changes: object) -> RpcLease:
    check_transition(lease.state, new)
    return replace(lease, state=new, **changes)  # type: ignore[arg-type]


def _holder(lease: RpcLease, master_id: str) -> None:
    if master_id != lease.master_id:
        raise LeaseRefused(f"lease {lease.lease_id} is held by another master")


def grant(lease: RpcLease, now: float, port: int | None) -> RpcLease:
    return _move(lease, LeaseState.GRANTED, expires=now + lease.ttl_s, port=port)


def renew(lease: RpcLease, master_id: str, now: float) -> RpcLease:
    """Only the holder renews, and only a lease still live: an expired one stays ended (its
    RPC server is stopped; the master asks for a new lease)."""
    _holder(lease, master_id)
    if lease.state in _HELD and now >= lease.expires:
        raise LeaseRefused(f"lease {lease.lease_id} expired")
    if lease.state is LeaseState.RECLAIMING:  # the node's deadline stands
        return _move(lease, LeaseState.RECLAIMING)
    return _move(lease, LeaseState.GRANTED, expires=now + lease.ttl_s)


def reclaim(lease: RpcLease, now: float, grace: float) -> RpcLease:
    """The node wants the memory back: the lease ends within `grace` whatever the master
    does (sooner when it was to expire sooner). Once: a reclaiming lease keeps its deadline."""
    if lease.state is not LeaseState.GRANTED:
        raise LeaseRefused(f"lease {lease.lease_id} is {lease.state.value}, not granted")
    if now >= lease.expires:
        raise LeaseRefused(f"lease {lease.lease_id} expired")
    return _move(lease, LeaseState.RECLAIMING, expires=min(lease.expires, now + grace))


def expire(lease: RpcLease, now: float) -> RpcLease:
    if now < lease.expires:
        raise LeaseRefused(f"lease {lease.lease_id} has not expired")
    return _move(lease, LeaseState.EXPIRED)


def release(lease: RpcLease, master_id: str) -> RpcLease:
    _holder(lease, master_id)
    return _move(lease, LeaseState.RELEASED)


__all__ = [
    "LeaseKind",
    "LeaseState",
    "RpcLease",
    "check_transition",
    "expire",
    "grant",
    "reclaim",
    "release",
    "renew",
]
