"""A new key's secret: 256 random bits, shown once at creation and then only its digest kept."""

from __future__ import annotations

import secrets

PREFIX = "trk-"  # recognisable in a leaked-secret scan; says nothing about the key


def new_secret() -> str:
    return PREFIX + secrets.token_urlsafe(32)
