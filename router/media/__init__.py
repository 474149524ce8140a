"""Image and voice helpers below the handlers: multipart forms the router rewrites, the image
lane's memory, and ffmpeg (`router.media.ffmpeg`).
"""

from __future__ import annotations

from router.media.form import FormPart, build_form, field_part, parse_form, part_name, part_spans
from router.media.state import ImageLane

__all__ = [
    "FormPart",
    "ImageLane",
    "build_form",
    "field_part",
    "parse_form",
    "part_name",
    "part_spans",
]
