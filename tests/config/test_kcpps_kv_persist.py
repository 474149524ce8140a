"""`router_kv_persist` in a .kcpps (docs/kcpps.md, docs/swaps.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from router.config import KcppsError, parse_kcpps
from router.domain import BackendMode


def test_kcpps_router_kv_persist() -> None:
    def parse(extra: dict[str, object]) -> str:
        data = json.dumps({"model_param": "/srv/a.gguf", **extra}).encode()
        return parse_kcpps(Path("/srv/m.kcpps"), data, BackendMode.LLAMA_SDCPP).kv_persist

    assert parse({}) == "auto"
    assert parse({"router_kv_persist": "on"}) == "on"
    assert parse({"router_kv_persist": "off"}) == "off"
    for bad in ("yes", 1, True, "ON", ""):
        with pytest.raises(KcppsError, match="router_kv_persist must be on, off or auto"):
            parse({"router_kv_persist": bad})
