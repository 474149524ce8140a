"""Site logic without handlers: the model-file scan and hash cache, GGUF metadata, the
inventory's records, and portable `.kcpps` export and resolution (docs/site.md).
"""

from __future__ import annotations

from router.config.kcpps import unresolved_fields
from router.site.files import FileStat, kind_of, scan_roots, suspicious
from router.site.gguf_meta import read_gguf_metadata
from router.site.hashing import Digest, HashCache, Hasher, HashRows, digest_file
from router.site.index import Located, SiteFiles
from router.site.inventory import file_records, model_record, runtime_record
from router.site.portable import (
    SHA256,
    PortableError,
    Slot,
    export_portable,
    portable_slots,
    runnable,
    split_key,
    write_atomic,
)

__all__ = [
    "SHA256",
    "Digest",
    "FileStat",
    "HashCache",
    "HashRows",
    "Hasher",
    "Located",
    "PortableError",
    "SiteFiles",
    "Slot",
    "digest_file",
    "export_portable",
    "file_records",
    "kind_of",
    "model_record",
    "portable_slots",
    "read_gguf_metadata",
    "runnable",
    "runtime_record",
    "scan_roots",
    "split_key",
    "suspicious",
    "unresolved_fields",
    "write_atomic",
]
