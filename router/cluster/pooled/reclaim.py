"""The lending node asks its memory back (docs/cluster.md, "The lending node's own need for
the memory"): a node whose own load needs bytes an RPC lease holds posts the lease to its
master over the cluster token; the master unloads the runtime holding it (`Borrower.reclaim`),
whose end releases the lease. The node does not wait on the answer: the lease's reclaim
deadline ends it either way (router/cluster/pooled/lease.py), and a 409 (the master holds
no runtime on the lease) ends it at once (the lender's `_ask_back`)."""

from __future__ import annotations

from router.cluster.pooled.lease import RpcLease
from router.cluster.service import ClusterService
from router.errors import ServiceUnavailable

LEASES = "/router/v1/node/rpc/leases"


def reclaim_path(lease_id: str) -> str:
    return f"{LEASES}/{lease_id}/reclaim"


async def ask_master(service: ClusterService, lease: RpcLease) -> None:
    master = service.settings.master_url
    if master is None:
        raise ServiceUnavailable("this node has no master_url: nobody to ask")
    body = {"node_id": service.settings.node_id}
    await service.client.call("POST", master, reclaim_path(lease.lease_id), body)


__all__ = ["LEASES", "ask_master", "reclaim_path"]
