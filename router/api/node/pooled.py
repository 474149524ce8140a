"""The node routes of pooled memory (docs/cluster.md, "Pooled memory"), cluster token only:

- `POST /router/v1/node/rpc/leases` `{"master_id", "node_id", "model", "bytes", "ttl_s"?,
  "port"?}`: the master asks this node to lend `bytes` for `model`; the answer names the
  lease and the RPC endpoint (`host:port`) that llama-server's `--rpc` takes. With
  `"kind": "vllm"` and `nnodes`, `node_rank`, `master_addr`, `master_port` (no `port`) the
  node runs a headless vLLM follower of its own config of `model` instead (endpoint null).
- `POST /router/v1/node/rpc/leases/{lease_id}/renew` `{"master_id"}`: the holder keeps it.
- `POST /router/v1/node/rpc/leases/{lease_id}/release` `{"master_id"}`: the holder ends it;
  the RPC server is stopped before the answer.
- `GET /router/v1/node/rpc/leases`: the leases in force and what the node could lend now.
- `POST /router/v1/node/rpc/leases/{lease_id}/reclaim` `{"node_id"}`, on the master: the
  lending node needs that lease's memory for its own load; the master unloads the runtime
  holding it (202, naming the runtime), whose end releases the lease.

Refusals are 409 `lease_refused` naming why (router/cluster/pooled/lender.py).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from router.appkeys import BORROWER, POOLED
from router.cluster.pooled.gang import GangFlags, follower_flags
from router.cluster.pooled.lease import LeaseKind, RpcLease
from router.cluster.pooled.lender import LeaseAsk
from router.edge import Handler, match_of, read_json
from router.errors import BadRequest, LeaseRefused


def _text(body: dict[str, Any], name: str) -> str:
    value = body.get(name)
    if not isinstance(value, str) or not value or len(value) > 200:
        raise BadRequest(f"{name} must be a non-empty string", param=name)
    return value


def _number(body: dict[str, Any], name: str, *, required: bool) -> int | None:
    value = body.get(name)
    if value is None and not required:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise BadRequest(f"{name} must be a number of at least 0", param=name)
    return int(value)


def _answer(lease: RpcLease, bind: str) -> web.StreamResponse:
    return web.json_response(
        {
            "lease_id": lease.lease_id,
            "state": lease.state.value,
            "node_id": lease.node_id,
            "model": lease.model,
            "bytes": lease.bytes,
            "endpoint": None if lease.port is None else f"{bind}:{lease.port}",
            "ttl_s": lease.ttl_s,
            "kind": lease.kind.value,
        }
    )


def _kind(value: Any) -> LeaseKind:
    if value is None:
        return LeaseKind.RPC
    try:
        return LeaseKind(value)
    except ValueError:
        raise BadRequest("kind must be rpc or vllm", param="kind") from None


def _gang(body: dict[str, Any]) -> GangFlags:
    return follower_flags(
        body.get("nnodes"), body.get("node_rank"), body.get("master_addr"), body.get("master_port")
    )


async def grant(request: web.Request) -> web.StreamResponse:
    body = await read_json(request, required=True)
    kind = _kind(body.get("kind"))
    ask = LeaseAsk(
        master_id=_text(body, "master_id"),
        node_id=_text(body, "node_id"),
        model=_text(body, "model"),
        bytes=_number(body, "bytes", required=True) or 0,
        ttl_s=_number(body, "ttl_s", required=False),
        port=_number(body, "port", required=False),
        kind=kind,
        gang=_gang(body) if kind is LeaseKind.VLLM else None,
    )
    lender = request.app[POOLED]
    return _answer(await lender.grant(ask), lender.bind)


async def renew(request: web.Request) -> web.StreamResponse:
    body = await read_json(request, required=True)
    lender = request.app[POOLED]
    lease = lender.renew(match_of(request).params["lease_id"], _text(body, "master_id"))
    return _answer(lease, lender.bind)


async def release(request: web.Request) -> web.StreamResponse:
    body = await read_json(request, required=True)
    lender = request.app[POOLED]
    lease_id = match_of(request).params["lease_id"]
    lease = await lender.release(lease_id, _text(body, "master_id"))
    return _answer(lease, lender.bind)


async def reclaim(request: web.Request) -> web.StreamResponse:
    body = await read_json(request, required=True)
    borrower = request.app.get(BORROWER)
    if borrower is None:
        raise LeaseRefused("this router is no master: it holds no RPC lease")
    lease_id = match_of(request).params["lease_id"]
    runtime = borrower.reclaim(lease_id, _text(body, "node_id"))
    return web.json_response({"lease_id": lease_id, "runtime": runtime}, status=202)


async def leases(request: web.Request) -> web.StreamResponse:
    lender = request.app[POOLED]
    return web.json_response(
        {"lends": lender.lends, "leases": lender.rows(), "room": lender.room()}
    )


NODE_HANDLERS: dict[str, Handler] = {
    "node.rpc_leases": leases,
    "node.rpc_lease": grant,
    "node.rpc_renew": renew,
    "node.rpc_release": release,
    "node.rpc_reclaim": reclaim,
}
