"""The live scoped keys (`KeyBook`): what auth matches a presented secret against, what
admission asks, and each key's tokens used today.

The store holds the rows; the book is loaded from it at start and told of every change the
admin API writes, so a request never waits on the disk. A presented secret is hashed once and
compared with every active digest through `hmac.compare_digest`, always all of them, so the
time taken says nothing about which key (if any) matched (docs/security.md, S18).
"""

from __future__ import annotations

import hmac
import math
from collections.abc import Iterable, Mapping

from router.errors import Forbidden, TooManyRequests
from router.keys.model import ScopedKey, seconds_to_reset, utc_day


class KeyBook:
    def __init__(self) -> None:
        self._keys: dict[str, ScopedKey] = {}  # revoked ones too: the list shows them
        self._active: tuple[tuple[bytes, ScopedKey], ...] = ()
        self._day = 0
        self._used: dict[str, int] = {}

    def load(self, keys: Iterable[ScopedKey], used_today: Mapping[str, int], wall: float) -> None:
        """At start: the stored keys and the tokens each used since the last UTC midnight."""
        self._keys = {key.name: key for key in keys}
        self._day = utc_day(wall)
        self._used = dict(used_today)
        self._index()

    def put(self, key: ScopedKey) -> None:
        """A key created, changed or revoked (already written to the store)."""
        self._keys[key.name] = key
        self._index()

    def _index(self) -> None:
        self._active = tuple((k.digest, k) for k in self._keys.values() if k.revoked is None)

    def get(self, name: str) -> ScopedKey | None:
        return self._keys.get(name)

    def keys(self) -> list[ScopedKey]:
        return sorted(self._keys.values(), key=lambda k: k.name)

    @property
    def active(self) -> int:
        return len(self._active)

    def match(self, probe: bytes) -> ScopedKey | None:
        """The active key whose digest is `probe`, or None; compares with every digest."""
        found = 0
        for index, (stored, _) in enumerate(self._active, start=1):
            # Multiply instead of `if`: the loop body is the same for matches and misses.
            found |= index * hmac.compare_digest(probe, stored)
        return self._active[found - 1][1] if found else None

    # -- usage and admission -----------------------------------------------------------------

    def used(self, name: str, wall: float) -> int:
        self._roll(wall)
        return self._used.get(name, 0)

    def charge(self, name: str, tokens: int, wall: float) -> None:
        """Tokens a finished request of key `name` used (its answer's usage report)."""
        if tokens > 0:
            self._roll(wall)
            self._used[name] = self._used.get(name, 0) + tokens

    def _roll(self, wall: float) -> None:
        day = utc_day(wall)
        if day != self._day:
            self._day, self._used = day, {}

    def admit(self, key: ScopedKey, model: str | None, wall: float) -> None:
        """Raises 403 for a model outside the key's list, 429 once its quota is used up."""
        if key.models and model is None:
            raise Forbidden(
                f"the key '{key.name}' may use only the models it lists: name one in the request",
                code="model_not_allowed",
                param="model",
            )
        if model is not None and not key.allows(model):
            raise Forbidden(
                f"the key '{key.name}' may not use the model '{model}'",
                code="model_not_allowed",
                param="model",
            )
        quota = key.daily_tokens
        if quota is not None and self.used(key.name, wall) >= quota:
            wait = math.ceil(seconds_to_reset(wall))
            raise TooManyRequests(
                f"the key '{key.name}' used its daily quota of {quota} tokens; "
                f"it resets at 00:00 UTC, in {wait} s",
                code="quota_exceeded",
                headers={"Retry-After": str(wait)},
            )
