"""`router_pin` in a .kcpps (docs/kcpps.md, docs/residency.md): never passed to KoboldCpp."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from backends.kobold import ROUTER_KEYS
from router.config import KcppsError, parse_kcpps
from router.domain import BackendMode


def test_kcpps_router_pin() -> None:
    def parse(extra: dict[str, object]) -> bool:
        data = json.dumps({"model_param": "/srv/a.gguf", **extra}).encode()
        return parse_kcpps(Path("/srv/m.kcpps"), data, BackendMode.LLAMA_SDCPP).pinned

    assert parse({}) is False
    assert parse({"router_pin": True}) is True
    assert parse({"router_pin": False}) is False
    for bad in ("yes", 1, "true", []):
        with pytest.raises(KcppsError, match="router_pin must be true or false"):
            parse({"router_pin": bad})
    assert "router_pin" in ROUTER_KEYS
