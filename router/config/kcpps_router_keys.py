"""The `router_*` keys of a `.kcpps` file: settings the router reads for itself and never hands
to a backend (docs/kcpps.md). Each check takes the key's raw value and returns the typed value
for `ModelConfig`, or raises `KcppsError` naming the key. Called by `parse_kcpps` (kcpps.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, Literal

from router.config.model_config import KcppsError, short
from router.config.unload_policy import PolicyError, parse_triggers
from router.domain import BackendMode

ALIAS_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$")
MAX_ALIASES = 32
PREFIX = "router_"
# Every `router_*` key the router reads; `router_vision` is read where guardians pick a
# helper model (router/cluster/guardians.py).
KNOWN_KEYS = frozenset(
    {
        "router_aliases",
        "router_jinja_kwargs_precedence",
        "router_kv_persist",
        "router_pin",
        "router_rpc_nodes",
        "router_sleep",
        "router_unload_policy",
        "router_vision",
        "router_vllm_nodes",
    }
)


def check_known(keys: Iterable[str]) -> None:
    """Refuse a `router_*` key the router does not read: the prefix is the router's, so a
    typo such as `router_kv_persit` would otherwise reach KoboldCpp and change nothing."""
    for key in keys:
        if key.startswith(PREFIX) and key not in KNOWN_KEYS:
            raise KcppsError(
                f"{short(key)} is not a router key (a typo?); the router's own keys are "
                + ", ".join(sorted(KNOWN_KEYS))
            )


def unload_triggers(value: Any) -> frozenset[str]:
    """`router_unload_policy` (router/config/unload_policy.py)."""
    try:
        return parse_triggers(value)
    except PolicyError as exc:
        raise KcppsError(str(exc)) from None


def aliases(value: Any, own: Iterable[str]) -> tuple[str, ...]:
    """`router_aliases`: a list of extra public names (OpenAI- or Ollama-style: letters,
    digits, `.`, `_`, `-`, `:`, `/`), none of them one of the model's `own` IDs. Clashes
    between files are refused by the catalog."""
    if value is None or value == []:
        return ()
    if not isinstance(value, list) or len(value) > MAX_ALIASES:
        raise KcppsError(f"router_aliases must be a list of at most {MAX_ALIASES} names")
    taken = set(own)
    out: list[str] = []
    for name in value:
        if not isinstance(name, str) or not ALIAS_PATTERN.match(name):
            raise KcppsError(
                f"router_aliases entry {short(str(name))!r} must be 1-128 letters, digits, "
                "'.', '_', '-', ':' or '/', starting with a letter or digit"
            )
        if name in taken or name in out:
            raise KcppsError(f"router_aliases names {name!r} twice (or the model's own ID)")
        out.append(name)
    return tuple(out)


def jinja_precedence(value: Any) -> Literal["config", "client"]:
    """`router_jinja_kwargs_precedence`: whose template kwargs win when the file's
    `jinja_kwargs` and the client's name the same one (router/forwarding/jinja.py)."""
    if value is None or value == "" or value == "config":
        return "config"
    if value == "client":
        return "client"
    raise KcppsError("router_jinja_kwargs_precedence must be config or client")


def kv_persist(value: Any) -> Literal["on", "off", "auto"]:
    """`router_kv_persist` (docs/swaps.md)."""
    if value is None or value == "auto":
        return "auto"
    if value in ("on", "off"):
        return "on" if value == "on" else "off"
    raise KcppsError("router_kv_persist must be on, off or auto")


def pinned(value: Any) -> bool:
    """`router_pin`: never evicted for memory (docs/residency.md)."""
    return flag("router_pin", value)


def sleep(value: Any) -> bool:
    """`router_sleep`: 1 or true turns it on; absent, 0 or false leave it off."""
    if value is None or value is False or (type(value) is int and value == 0):
        return False
    if value is True or (type(value) is int and value == 1):
        return True
    raise KcppsError("router_sleep must be 0 or 1")


NODE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
MAX_RPC_NODES = 16


def rpc_nodes(value: Any) -> tuple[str, ...] | Literal["auto"] | None:
    """`router_rpc_nodes` (docs/cluster.md, "Pooled memory"): `auto` or a list of node IDs
    (never addresses: the lending node names its own endpoint under a lease)."""
    if value is None or value == [] or value == "":
        return None
    if value == "auto":
        return "auto"
    return _node_ids("router_rpc_nodes", value, "auto or ")


def vllm_nodes(value: Any, mode: BackendMode) -> tuple[str, ...] | None:
    """`router_vllm_nodes` (docs/cluster.md, "vLLM multi-node"): the node IDs whose headless
    vLLM followers join this model's head, in rank order (rank 1 first). A list only: the
    gang's size is vLLM's `--nnodes`, which the file's author chooses with its parallelism."""
    if value is None or value == []:
        return None
    if mode is not BackendMode.VLLM:
        raise KcppsError("router_vllm_nodes needs backend_mode vllm (llama.cpp: router_rpc_nodes)")
    return _node_ids("router_vllm_nodes", value, "")


def _node_ids(key: str, value: Any, other: str) -> tuple[str, ...]:
    if not isinstance(value, list) or len(value) > MAX_RPC_NODES:
        raise KcppsError(f"{key} must be {other}a list of at most {MAX_RPC_NODES} node IDs")
    for node in value:
        if not isinstance(node, str) or not NODE_ID.match(node):
            raise KcppsError(
                f"{key} entry {short(str(node))!r} is no node ID (1-64 letters, "
                "digits, '.', '_' or '-'; an address is never accepted)"
            )
    if len(set(value)) != len(value):
        raise KcppsError(f"{key} names a node twice")
    return tuple(value)


def flag(key: str, value: Any) -> bool:
    """A true/false key; absent is false (also the file's own `run_embed_separate`)."""
    if value is None:
        return False
    if isinstance(value, bool):
        return value
    raise KcppsError(f"{key} must be true or false")


__all__ = [
    "ALIAS_PATTERN",
    "KNOWN_KEYS",
    "MAX_ALIASES",
    "PREFIX",
    "aliases",
    "check_known",
    "flag",
    "jinja_precedence",
    "kv_persist",
    "pinned",
    "rpc_nodes",
    "sleep",
    "unload_triggers",
    "vllm_nodes",
]
