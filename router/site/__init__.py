"""Site logic without handlers: the model-file scan and hash cache, GGUF metadata, the
inventory's records, portable `.kcpps` export and resolution, plain `.kcpps` files written by
the config-file routes (names, screening, findings) and cook plans (docs/site.md).
"""

from __future__ import annotations

from router.config.files import write_atomic
from router.config.kcpps import unresolved_fields
from router.site.configs import (
    SUFFIX,
    Finding,
    catalog_findings,
    check_config,
    config_name,
    existing,
    first_error,
    plain_name,
    remove_file,
    render,
    screen_options,
)
from router.site.cook import CookPlan, plan_cook, probe_model_file
from router.site.files import FileStat, kind_of, scan_roots, suspicious
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
)

__all__ = [
    "SHA256",
    "SUFFIX",
    "CookPlan",
    "Digest",
    "FileStat",
    "Finding",
    "HashCache",
    "HashRows",
    "Hasher",
    "Located",
    "PortableError",
    "SiteFiles",
    "Slot",
    "catalog_findings",
    "check_config",
    "config_name",
    "digest_file",
    "existing",
    "export_portable",
    "file_records",
    "first_error",
    "kind_of",
    "model_record",
    "plain_name",
    "plan_cook",
    "portable_slots",
    "probe_model_file",
    "remove_file",
    "render",
    "runnable",
    "runtime_record",
    "scan_roots",
    "screen_options",
    "split_key",
    "suspicious",
    "unresolved_fields",
    "write_atomic",
]
