"""Lending on the wire: the headers a lending master puts on a lent request, their format and
their parser (docs/lending.md). The one place these names are spelled.

The master (the owner's side, router/lending/owner.py) sends a lent request to the helper
node's inference route (`/router/v1/node/inference/<path>`, cluster token only) with
`lent_headers`; that route reads them back with `parse_lent`, and they never go further (the
inner request drops `WIRE_HEADERS`). A helper that hands the request back answers 409 with the
error code `OFFLOAD_RETURNED`.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping, MutableMapping
from dataclasses import dataclass

from router.errors import BadRequest
from router.tracing import Span, tracer

OFFLOAD_HEADER = "X-Tensors-Offload"  # "1": a lent request (honoured on node routes only)
OFFLOAD_LOAD_HEADER = "X-Tensors-Offload-Load"  # "0": the link forbids loading the model
OFFLOAD_RESTORE_HEADER = "X-Tensors-Offload-Restore"  # "1": restore the helper's model after
OFFLOAD_OWNER_HEADER = "X-Tensors-Offload-Owner"  # "<node_id>/<model_id>": whose work it is
OFFLOAD_RETURNED = "offload_returned"  # the error code of a request handed back to its owner

WIRE_HEADERS = (OFFLOAD_HEADER, OFFLOAD_LOAD_HEADER, OFFLOAD_RESTORE_HEADER, OFFLOAD_OWNER_HEADER)


@dataclass(frozen=True)
class Lent:
    """What the headers of a lent request say."""

    allow_load: bool  # the link allows loading the helper's model
    restore: bool  # the owner asks for the helper's model to be restored afterwards
    owner: tuple[str, str] | None  # (node ID, model ID); None from an older master


def owner_header(node_id: str, model_id: str) -> str:
    """The lent request's `X-Tensors-Offload-Owner` value: `<node_id>/<model_id>`."""
    return f"{node_id}/{model_id}"


def parse_owner(value: str) -> tuple[str, str]:
    """`X-Tensors-Offload-Owner` back to (node ID, model ID). Node IDs hold no slash; a model
    ID may (`org/model`), so the first slash splits. BadRequest when a part is missing."""
    node_id, sep, model_id = value.strip().partition("/")
    if not sep or not node_id or not model_id:
        raise BadRequest(f"X-Tensors-Offload-Owner must be <node_id>/<model_id>, not {value!r}")
    return node_id, model_id


def lent_headers(owner: tuple[str, str], *, allow_load: bool, restore: bool) -> dict[str, str]:
    """The headers that mark a request lent by `owner` (node ID, model ID)."""
    headers = {
        OFFLOAD_HEADER: "1",
        OFFLOAD_LOAD_HEADER: "1" if allow_load else "0",
        OFFLOAD_OWNER_HEADER: owner_header(*owner),
    }
    if restore:
        headers[OFFLOAD_RESTORE_HEADER] = "1"
    return headers


def parse_lent(headers: Mapping[str, str]) -> Lent | None:
    """The lent mark of a node inference request, or None for a relayed (not lent) one.
    BadRequest when the owner header is malformed."""
    if headers.get(OFFLOAD_HEADER) != "1":
        return None
    raw_owner = headers.get(OFFLOAD_OWNER_HEADER)
    return Lent(
        allow_load=headers.get(OFFLOAD_LOAD_HEADER) != "0",
        restore=headers.get(OFFLOAD_RESTORE_HEADER) == "1",
        owner=parse_owner(raw_owner) if raw_owner is not None else None,
    )


def returned_message(raw: bytes) -> str | None:
    """The helper's message when it handed the request back (409 `offload_returned`)."""
    try:
        doc = json.loads(raw)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    error = doc.get("error") if isinstance(doc, dict) else None
    if isinstance(error, dict) and error.get("code") == OFFLOAD_RETURNED:
        return str(error.get("message", ""))[:512]
    return None


@contextlib.contextmanager
def lent_span(headers: MutableMapping[str, str], node: str, model: str) -> Iterator[Span]:
    """The CLIENT span of a lending hop (docs/observability.md), injected into the lent
    request's headers as the parent of what the helper does for it."""
    traces = tracer()
    attributes = {"tensor_router.node": node, "tensor_router.model": model}
    with traces.client("lend", headers, attributes) as span:
        yield span
