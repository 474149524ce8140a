"""The router's OpenAPI description (GET /router/v1/openapi.json), generated from the route
table (router/classify/table.py) and the response shapes (router/openapi/shapes.py)."""

from router.openapi.build import MissingEntry, build, document, openapi_path
from router.openapi.entries import ENTRIES, Entry

__all__ = ["ENTRIES", "Entry", "MissingEntry", "build", "document", "openapi_path"]
