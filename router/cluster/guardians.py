"""Guardian models: a multimodal model that answers image requests for a text-only one.

Assignments have a scope (`cluster`, `node` or `model`); the most specific one wins. A request
"carries images" when an OpenAI message has an `image_url` / `input_image` content part, an
Ollama message or generate body has a non-empty `images` list, or an Anthropic message has an
`image` block. The check is two steps so plain chats pay almost nothing: a byte scan for the
telltale keys, and only then a JSON parse of the body. Pure but for `GuardianTable`, the
owner of the assignments in force, which writes through the store part it is handed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from router.config import ModelConfig
from router.errors import BadRequest

SCOPES = ("model", "node", "cluster")  # most specific first
_HINT = re.compile(rb'"(?:image_url|input_image|images|image)"')
_IMAGE_PART_TYPES = frozenset({"image_url", "input_image", "image"})


@dataclass(frozen=True, slots=True)
class Assignment:
    scope: str
    node_id: str
    model_id: str
    guardian_node_id: str
    guardian_model_id: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "scope": self.scope,
            "node_id": self.node_id,
            "model_id": self.model_id,
            "guardian": {"node_id": self.guardian_node_id, "model_id": self.guardian_model_id},
        }

    def row(self) -> tuple[str, str, str, str, str]:
        return (
            self.scope,
            self.node_id,
            self.model_id,
            self.guardian_node_id,
            self.guardian_model_id,
        )


def has_vision(config: ModelConfig) -> bool:
    """A projector (`mmproj`), or a vLLM configuration that declares `router_vision: true`."""
    return "mmproj" in config.components or config.raw.get("router_vision") is True


def resolve(assignments: Iterable[Assignment], node_id: str, model_id: str) -> Assignment | None:
    """The model's own assignment, else its node's, else the cluster's."""
    by_key = {(a.scope, a.node_id, a.model_id): a for a in assignments}
    for key in (("model", node_id, model_id), ("node", node_id, ""), ("cluster", "", "")):
        if key in by_key:
            return by_key[key]
    return None


def carries_images(body: bytes) -> bool:
    if not _HINT.search(body):
        return False
    try:
        doc = json.loads(body)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return False
    return isinstance(doc, dict) and _doc_has_images(doc)


def _doc_has_images(doc: Mapping[str, Any]) -> bool:
    if _non_empty_list(doc.get("images")):  # Ollama /api/generate
        return True
    messages = doc.get("messages")
    if isinstance(doc.get("input"), list):  # OpenAI Responses
        messages = doc["input"]
    if not isinstance(messages, list):
        return False
    for message in messages:
        if not isinstance(message, dict):
            continue
        if _non_empty_list(message.get("images")):  # Ollama /api/chat
            return True
        content = message.get("content")
        if isinstance(content, list) and any(
            isinstance(part, dict) and part.get("type") in _IMAGE_PART_TYPES for part in content
        ):
            return True
    return False


def _non_empty_list(value: Any) -> bool:
    return isinstance(value, list) and len(value) > 0


def parse_assignment(body: Mapping[str, Any], own_node: str) -> Assignment:
    """`{"scope", "node_id", "model_id", "guardian": {"node_id", "model_id"}}`, checked."""
    scope = body.get("scope")
    if scope not in SCOPES:
        raise BadRequest("scope must be one of cluster, node, model", param="scope")
    node_id = _text(body, "node_id", own_node if scope != "cluster" else "")
    model_id = _text(body, "model_id", "")
    if scope == "cluster" and (node_id or model_id):
        raise BadRequest("a cluster-scope assignment names no node_id or model_id", param="scope")
    if scope == "node" and model_id:
        raise BadRequest("a node-scope assignment names no model_id", param="model_id")
    if scope == "model" and not model_id:
        raise BadRequest("a model-scope assignment needs model_id", param="model_id")
    guardian = body.get("guardian")
    if not isinstance(guardian, dict):
        raise BadRequest('send "guardian": {"node_id", "model_id"}', param="guardian")
    guardian_node = _text(guardian, "node_id", own_node) or own_node
    guardian_model = _text(guardian, "model_id", "")
    if not guardian_model:
        raise BadRequest("guardian.model_id is required", param="guardian")
    return Assignment(scope, node_id, model_id, guardian_node, guardian_model)


def parse_key(query: Mapping[str, str], own_node: str) -> tuple[str, str, str]:
    """The (scope, node_id, model_id) a DELETE names."""
    scope = query.get("scope", "")
    if scope not in SCOPES:
        raise BadRequest("scope must be one of cluster, node, model", param="scope")
    if scope == "cluster":
        return scope, "", ""
    node_id = query.get("node_id") or own_node
    model_id = query.get("model_id", "") if scope == "model" else ""
    if scope == "model" and not model_id:
        raise BadRequest("model_id is required at model scope", param="model_id")
    return scope, node_id, model_id


def _text(body: Mapping[str, Any], name: str, default: str) -> str:
    value = body.get(name, default)
    if value is None:
        return default
    if not isinstance(value, str) or len(value) > 256:
        raise BadRequest(f"{name} must be a string of at most 256 characters", param=name)
    return value


class GuardianRows(Protocol):
    """Where assignments persist (`Store.guardians`, router/store/guardians.py)."""

    async def rows(self) -> list[dict[str, Any]]: ...

    async def save(self, row: tuple[str, str, str, str, str]) -> None: ...

    async def delete(self, scope: str, node_id: str, model_id: str) -> int: ...


class GuardianTable:
    """The assignments in force, replaced whole when one changes (requests read it lock-free).
    A change goes to the store first, then the stored set is put in force (`assign`, `clear`)."""

    def __init__(self, stored: GuardianRows, assignments: Iterable[Assignment] = ()) -> None:
        self.stored = stored
        self.assignments: tuple[Assignment, ...] = tuple(assignments)

    @classmethod
    async def load(cls, stored: GuardianRows) -> GuardianTable:
        table = cls(stored)
        await table.reload()
        return table

    async def reload(self) -> None:
        self.assignments = tuple(Assignment(**row) for row in await self.stored.rows())

    async def assign(self, assignment: Assignment) -> None:
        """Store `assignment` (replacing the one of its scope and key), then put it in force."""
        await self.stored.save(assignment.row())
        await self.reload()

    async def clear(self, scope: str, node_id: str, model_id: str) -> int:
        """Remove the assignment of that scope and key; how many were removed (0 or 1)."""
        removed = await self.stored.delete(scope, node_id, model_id)
        if removed:
            await self.reload()
        return removed

    def resolve(self, node_id: str, model_id: str) -> Assignment | None:
        return resolve(self.assignments, node_id, model_id) if self.assignments else None
