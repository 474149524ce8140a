"""What a GGUF file says about itself: architecture, parameter count, file type, context length.

Read with the `gguf` package's reader (a memory map: only the header pages are touched, never
the weights). Any file it cannot parse simply has no metadata; the inventory still lists it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import gguf

log = logging.getLogger(__name__)


def _value(reader: gguf.GGUFReader, key: str) -> Any:
    field = reader.get_field(key)
    if field is None:
        return None
    try:
        return field.contents()
    except (ValueError, IndexError, UnicodeDecodeError):
        return None


def _file_type(code: Any) -> str | None:
    if not isinstance(code, int):
        return None
    import gguf

    try:
        return gguf.LlamaFileType(code).name.removeprefix("MOSTLY_")
    except ValueError:
        return str(code)


def read_gguf_metadata(path: str) -> dict[str, Any] | None:
    """The few keys the inventory shows, or None when the file is not a readable GGUF."""
    # Imported on first use: gguf brings numpy, ~18 MiB of an idle router's memory, and only
    # an inventory with files reads GGUF headers.
    import gguf

    try:
        reader = gguf.GGUFReader(path, "r")
    except Exception as exc:  # a damaged header raises anything from ValueError to IndexError
        log.debug("no GGUF metadata for %s: %s", path, exc)
        return None
    arch = _value(reader, "general.architecture")
    arch = arch if isinstance(arch, str) else None
    context = _value(reader, f"{arch}.context_length") if arch else None
    return {
        "architecture": arch,
        "name": _str_or_none(_value(reader, "general.name")),
        "parameter_count": sum(int(t.n_elements) for t in reader.tensors),
        "size_label": _str_or_none(_value(reader, "general.size_label")),
        "file_type": _file_type(_value(reader, "general.file_type")),
        "context_length": int(context) if isinstance(context, int) else None,
    }


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def read_gguf_header(path: str) -> dict[str, Any] | None:
    """What Ollama's /api/show tells about a model (router/ollama/metadata.py shapes it): the
    `general.*` and `<arch>.*` scalars, the parameter count, the file type and whether the
    chat template handles tools. None when the file is not a readable GGUF. Blocking."""
    import gguf

    try:
        reader = gguf.GGUFReader(path, "r")
    except Exception as exc:  # as above: a damaged header raises anything
        log.debug("no GGUF header for %s: %s", path, exc)
        return None
    arch = _str_or_none(_value(reader, "general.architecture"))
    info: dict[str, Any] = {}
    for key in reader.fields:
        if key.startswith("general.") or (arch and key.startswith(f"{arch}.")):
            value = _value(reader, key)
            if isinstance(value, int | float | str) and not isinstance(value, bool):
                info[key] = value
    if not isinstance(info.get("general.parameter_count"), int):
        info["general.parameter_count"] = sum(int(t.n_elements) for t in reader.tensors)
    template = _value(reader, "tokenizer.chat_template")
    return {
        "architecture": arch,
        "file_type": _file_type(_value(reader, "general.file_type")),
        "model_info": info,
        # Jinja templates that take tools read a `tools` variable; Go templates `.Tools`.
        "tools": isinstance(template, str) and "tools" in template.lower(),
    }
