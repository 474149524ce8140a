"""Scoped keys (docs/configuration.md, "Scoped keys"): keys an admin creates, changes and
revokes at run time, each with the models it may use, a priority class, a cap on concurrent
requests and a daily token quota. `model` holds the key and its pure rules, `book` the live
keys that auth and admission read, `secret` the making of a new secret."""

from router.keys.book import KeyBook
from router.keys.model import (
    CALLER_HEADER,
    ScopedKey,
    caller_header,
    changed,
    parse_caller,
    seconds_to_reset,
    spec_from,
    utc_day,
)
from router.keys.secret import new_secret

__all__ = [
    "CALLER_HEADER",
    "KeyBook",
    "ScopedKey",
    "caller_header",
    "changed",
    "new_secret",
    "parse_caller",
    "seconds_to_reset",
    "spec_from",
    "utc_day",
]
