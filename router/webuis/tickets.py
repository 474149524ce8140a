"""Tickets and backend-UI sessions: random tokens bound to one UI kind, kept in memory.

A ticket is minted by the management listener for an admin, lives one minute and is good
once; the backend-UI listener trades it for a session cookie that lives 15 minutes. Both are
lost on restart, which only means opening the UI again.

Tokens are stored as SHA-256 digests, so a lookup compares digests of what was presented
rather than the secrets themselves (a dict probe on a digest leaks nothing usable about
another token), and a memory dump holds no usable token. Each store has a cap: the oldest
entries go first, so a flood of ticket requests cannot grow memory without bound.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

TICKET_TTL = 60.0
SESSION_TTL = 15 * 60.0
TICKET_CAP = 1024
SESSION_CAP = 256
TOKEN_BYTES = 32


@dataclass(frozen=True)
class Grant:
    kind_id: str
    expires: float  # on the store's clock


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "replace")).digest()


class TokenStore:
    """Tokens -> the kind they open, each until its expiry; `single_use` ones are consumed by
    the first presentation, whichever kind it names."""

    def __init__(
        self,
        ttl: float,
        cap: int,
        *,
        single_use: bool,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl, self._cap, self._single_use, self._clock = ttl, cap, single_use, clock
        self._grants: OrderedDict[bytes, Grant] = OrderedDict()

    def __len__(self) -> int:
        return len(self._grants)

    def issue(self, kind_id: str) -> str:
        self._prune()
        while len(self._grants) >= self._cap:
            self._grants.popitem(last=False)
        token = secrets.token_urlsafe(TOKEN_BYTES)
        self._grants[_digest(token)] = Grant(kind_id, self._clock() + self.ttl)
        return token

    def check(self, token: str | None, kind_id: str) -> bool:
        """Whether `token` opens `kind_id` now. A single-use token is spent either way."""
        if not token:
            return False
        key = _digest(token)
        grant = self._grants.pop(key, None) if self._single_use else self._grants.get(key)
        if grant is None:
            return False
        if grant.expires <= self._clock():
            self._grants.pop(key, None)
            return False
        return secrets.compare_digest(grant.kind_id, kind_id)

    def _prune(self) -> None:
        now = self._clock()
        for key in [k for k, g in self._grants.items() if g.expires <= now]:
            del self._grants[key]


def tickets(clock: Callable[[], float] = time.monotonic) -> TokenStore:
    return TokenStore(TICKET_TTL, TICKET_CAP, single_use=True, clock=clock)


def sessions(clock: Callable[[], float] = time.monotonic) -> TokenStore:
    return TokenStore(SESSION_TTL, SESSION_CAP, single_use=False, clock=clock)


__all__ = ["SESSION_TTL", "TICKET_TTL", "Grant", "TokenStore", "sessions", "tickets"]
