"""What an operation's bodies look like, as OpenAPI media-type maps (router/openapi/entries.py).

An `Answer` is one body: media type -> JSON Schema, where a schema may name a pydantic model of
router/openapi/shapes.py (`Ref`) that the builder turns into a component.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

Schema = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Answer:
    """One body: `media` type -> JSON Schema; `model`/`many` say that the schema is a pydantic
    model (or a list of it) to be referenced from the components."""

    description: str
    media: Mapping[str, Schema] = field(default_factory=dict)
    model: type[BaseModel] | None = None
    many: bool = False


def json_of(model: type[BaseModel], description: str = "", *, many: bool = False) -> Answer:
    return Answer(description or model.__doc__ or model.__name__, model=model, many=many)


def json_schema(schema: Schema, description: str) -> Answer:
    return Answer(description, {"application/json": schema})


JSON_OBJECT = json_schema({"type": "object"}, "A JSON object (its fields: docs/site.md)")
JSON_ARRAY = json_schema({"type": "array"}, "A JSON array (its items: docs/site.md)")
JSON_ANY = json_schema({}, "A JSON value")
EVENTS = Answer(
    "Server-sent events, one JSON object per `data:` line, until the client disconnects",
    {"text/event-stream": {"type": "string"}},
)
TEXT = Answer("Plain text", {"text/plain": {"type": "string"}})
METRICS = Answer("Prometheus text exposition format", {"text/plain": {"type": "string"}})
HTML_OR_ASSET = Answer("The WebUI's HTML page or a static asset", {"*/*": {}})
BINARY = Answer("The file's bytes", {"application/octet-stream": {}})
NO_CONTENT = Answer("No content")
REDIRECT = Answer("A redirect (Location header)")
# A forwarded answer: whatever the selected backend sent, status and body passed through.
PASSTHROUGH = Answer(
    "The backend's answer, passed through (JSON, SSE, audio, images...)", {"*/*": {}}
)
ANY_REQUEST = Answer("Any body the backend accepts", {"*/*": {}})
JSON_REQUEST = json_schema({"type": "object"}, "A JSON object (the backend's own request)")
