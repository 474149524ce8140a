"""Counting `hmac.compare_digest`: what the constant-time tests (S18) assert over."""

from __future__ import annotations

import hmac

import pytest


def spy_compare_digest(monkeypatch: pytest.MonkeyPatch) -> list[tuple[bytes, bytes]]:
    """Every (presented, stored) pair compared from now on, in order; clear it between probes."""
    calls: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def counting(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", counting)
    return calls
