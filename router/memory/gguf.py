"""The one GGUF header reader: what a model file says about itself, parsed once per file version.

The memory estimate (router/memory/shape.py), the site inventory (router/site/hashing.py) and
the Ollama routes (router/site/gguf_headers.py) all read headers here, so a file is parsed
once however many of them ask. The `gguf` package's reader memory-maps the file and touches
only the header pages and the tensor index, never the weights; still, it parses the whole
tokenizer array (about a second for a 150k-token vocabulary), hence the cache. A file it
cannot parse has no header: callers treat it as an unknown model, never as an error.
"""

from __future__ import annotations

import functools
import logging
import os
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

CACHED_FILES = 64  # file versions kept: a catalog's models, several times over


@dataclass(frozen=True)
class GgufHeader:
    """The facts of one header its readers use (values copied out: no map of the file kept)."""

    architecture: str | None
    general: dict[str, Any]  # the `general.*` scalars, full keys
    arch_fields: dict[str, Any]  # the `<architecture>.*` fields, prefix removed, arrays kept
    parameter_count: int  # elements of every tensor
    tensor_bytes: int
    n_vocab: int  # tokens in the tokenizer's array (0 when it has none)
    file_type: str | None  # the quantization name, `Q4_K_M`
    template_takes_tools: bool = field(default=False)

    def inventory(self) -> dict[str, Any]:
        """The few keys the site inventory shows."""
        context = self.arch_fields.get("context_length")
        return {
            "architecture": self.architecture,
            "name": _str_or_none(self.general.get("general.name")),
            "parameter_count": self.parameter_count,
            "size_label": _str_or_none(self.general.get("general.size_label")),
            "file_type": self.file_type,
            "context_length": context if _is_int(context) else None,
        }

    def ollama(self) -> dict[str, Any]:
        """What Ollama's /api/show tells about a model (router/ollama/metadata.py shapes it):
        the `general.*` and `<arch>.*` scalars, the parameter count, the file type and whether
        the chat template handles tools."""
        arch = self.architecture
        info = {key: value for key, value in self.general.items() if _scalar(value)}
        if arch:
            info |= {f"{arch}.{k}": v for k, v in self.arch_fields.items() if _scalar(v)}
        if not _is_int(info.get("general.parameter_count")):
            info["general.parameter_count"] = self.parameter_count
        return {
            "architecture": arch,
            "file_type": self.file_type,
            "model_info": info,
            "tools": self.template_takes_tools,
        }


def read_header(path: str) -> GgufHeader | None:
    """The header of a GGUF file, or None when it is missing or not a readable GGUF.
    Blocking (run it off the event loop for a file not read yet); cached per file version
    (path, size, mtime), so a file that changes is read again."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return _read_header(path, st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=CACHED_FILES)
def _read_header(path: str, _size: int, _mtime_ns: int) -> GgufHeader | None:
    # Imported on first use: gguf brings numpy, ~18 MiB of an idle router's memory.
    import gguf

    try:
        reader = gguf.GGUFReader(path, "r")
    except Exception as exc:  # a damaged header raises anything from ValueError to IndexError
        log.debug("no GGUF header for %s: %s", path, exc)
        return None
    arch = _str_or_none(_value(reader, "general.architecture"))
    prefix = f"{arch}." if arch else None
    general = {k: _value(reader, k) for k in reader.fields if k.startswith("general.")}
    template = _value(reader, "tokenizer.chat_template")
    return GgufHeader(
        architecture=arch,
        general={k: v for k, v in general.items() if v is not None},
        arch_fields={
            k.removeprefix(prefix): _value(reader, k)
            for k in reader.fields
            if prefix and k.startswith(prefix)
        },
        parameter_count=sum(int(t.n_elements) for t in reader.tensors),
        tensor_bytes=sum(int(t.n_bytes) for t in reader.tensors),
        n_vocab=len(_value(reader, "tokenizer.ggml.tokens") or ()),
        file_type=_file_type(general.get("general.file_type")),
        # Jinja templates that take tools read a `tools` variable; Go templates `.Tools`.
        template_takes_tools=isinstance(template, str) and "tools" in template.lower(),
    )


def _value(reader: Any, key: str) -> Any:
    found = reader.get_field(key)
    if found is None:
        return None
    try:
        return found.contents()
    except (ValueError, IndexError, UnicodeDecodeError):
        return None


def _file_type(code: Any) -> str | None:
    if not _is_int(code):
        return None
    import gguf

    try:
        return str(gguf.LlamaFileType(code).name.removeprefix("MOSTLY_"))
    except ValueError:
        return str(code)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _scalar(value: Any) -> bool:
    return isinstance(value, int | float | str) and not isinstance(value, bool)


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


__all__ = ["GgufHeader", "read_header"]
