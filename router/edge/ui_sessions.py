"""WebUI login sessions: random cookie tokens -> a CSRF token and an expiry, in memory only.

A session is what `POST /router/v1/ui/session` hands out after an admin key was shown. Only the
SHA-256 digest of a cookie token is kept (a memory dump or a log of this table opens nothing),
and a lookup is a dict lookup on that digest: the attacker does not choose the digest's bytes,
so the lookup's timing says nothing about a real token. The CSRF token is compared with
`hmac.compare_digest`. Sessions are bounded in number; when full, the one that would expire
first goes. A restart ends every session (the operator signs in again), by design: nothing
about a session is ever written to disk.

Also here: the per-peer limit on failed logins (a sliding one-minute window).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

COOKIE_NAME = "tensor_router_session"
COOKIE_PATH = "/router/"
CSRF_HEADER = "X-CSRF-Token"
_TOKEN_BYTES = 32
_FAILURE_WINDOW = 60.0
_MAX_TRACKED_PEERS = 4096


@dataclass(frozen=True, slots=True)
class UiSession:
    csrf_token: str
    expires_at: float  # unix seconds, for the client
    expires_mono: float  # monotonic, for the check (a wall-clock jump changes nothing)

    def csrf_ok(self, presented: str | None) -> bool:
        if not presented:
            return False
        return hmac.compare_digest(presented.encode("utf-8"), self.csrf_token.encode("utf-8"))


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()


class UiSessions:
    """The open sessions of this router process (clocks injectable for tests)."""

    def __init__(
        self,
        ttl: float,
        max_sessions: int,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.ttl = ttl
        self.max_sessions = max_sessions
        self.clock, self._wall = clock, wall
        self._by_digest: dict[bytes, UiSession] = {}

    def __len__(self) -> int:
        return len(self._by_digest)

    def create(self) -> tuple[str, UiSession]:
        """A new session: (the cookie token, the session). Evicts when the table is full."""
        self._expire()
        while len(self._by_digest) >= self.max_sessions:
            oldest = min(self._by_digest, key=lambda d: self._by_digest[d].expires_mono)
            del self._by_digest[oldest]
        token = secrets.token_urlsafe(_TOKEN_BYTES)
        session = UiSession(
            csrf_token=secrets.token_urlsafe(_TOKEN_BYTES),
            expires_at=self._wall() + self.ttl,
            expires_mono=self.clock() + self.ttl,
        )
        self._by_digest[_digest(token)] = session
        return token, session

    def lookup(self, token: str | None) -> UiSession | None:
        """The live session of a cookie token; an expired one is removed and gives None."""
        if not token:
            return None
        key = _digest(token)
        session = self._by_digest.get(key)
        if session is None:
            return None
        if self.clock() >= session.expires_mono:
            del self._by_digest[key]
            return None
        return session

    def end(self, token: str | None) -> bool:
        return bool(token) and self._by_digest.pop(_digest(token or ""), None) is not None

    def _expire(self) -> None:
        now = self.clock()
        for key in [k for k, s in self._by_digest.items() if now >= s.expires_mono]:
            del self._by_digest[key]


class LoginLimiter:
    """At most `per_minute` failed logins per peer address in any 60 s; 0 turns it off."""

    def __init__(self, per_minute: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.per_minute = per_minute
        self._clock = clock
        self._failures: dict[str, deque[float]] = {}

    def retry_after(self, peer: str | None) -> float:
        """Seconds until this peer may try again; 0 when it may try now."""
        if self.per_minute <= 0:
            return 0.0
        window = self._window(peer or "")
        if len(window) < self.per_minute:
            return 0.0
        return max(0.0, window[0] + _FAILURE_WINDOW - self._clock())

    def failed(self, peer: str | None) -> None:
        if self.per_minute <= 0:
            return
        if len(self._failures) >= _MAX_TRACKED_PEERS:
            # Bounded memory: forget the peers whose window has emptied, then the oldest.
            for key in [k for k in self._failures if not self._window(k)]:
                del self._failures[key]
            while len(self._failures) >= _MAX_TRACKED_PEERS:
                del self._failures[next(iter(self._failures))]
        self._window(peer or "").append(self._clock())

    def _window(self, peer: str) -> deque[float]:
        window = self._failures.setdefault(peer, deque())
        cutoff = self._clock() - _FAILURE_WINDOW
        while window and window[0] <= cutoff:
            window.popleft()
        return window
