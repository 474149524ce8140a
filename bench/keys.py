"""The added p50 latency of scoped-key checks (issue 35; target <= 0.05 ms).

In process, no sockets: what a request pays in the auth middleware and admission, timed per
call with `perf_counter_ns` on a mocked request. Arms, interleaved ABC with the order rotated:
`config_key` (a router.yaml inference key, no scoped keys: the check before issue 35),
`config_key_100_scoped` (the same key while 100 scoped keys exist: every request now also
compares the scoped digests), `scoped_key` (one of those 100 scoped keys, with a model list
and a quota: its check plus admission). Reported: each arm's p50 and p99 in microseconds and
the added p50 of the two later arms over `config_key` (median over repetitions).

`python -m bench.keys [--quick] [--reps N]`.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from aiohttp.test_utils import make_mocked_request

from bench import common as c
from router.classify import match
from router.config import Settings
from router.domain import Priority
from router.edge.auth import KeyRing, Policy, digest
from router.edge.caller import SCOPED_KEY
from router.keys import KeyBook, ScopedKey

CONFIG_KEY = "bench-config-inference-key-5d1e0c7a"
ADMIN_KEY = "bench-config-admin-key-8b2f4e61"
SCOPED = 100
CALLS = 20000


def _policy(scoped: int) -> Policy:
    settings = Settings.model_validate(
        {"auth": {"inference_keys": [CONFIG_KEY], "admin_keys": [ADMIN_KEY]}}
    )
    book = KeyBook()
    keys = [
        ScopedKey(
            f"k{i}",
            digest(f"scoped-secret-{i:04d}-bench"),
            ("chat-*",),
            Priority.BATCH,
            4,
            10**9,
            0.0,
        )
        for i in range(scoped)
    ]
    book.load(keys, {}, time.time())
    return Policy(KeyRing.from_settings(settings), settings, None, book)


def _arm(policy: Policy, secret: str, admit: bool) -> Callable[[], None]:
    route = match("POST", "/v1/chat/completions").route
    headers = {"Authorization": f"Bearer {secret}"}
    # One request, made once (a mocked request costs milliseconds to build): only the check
    # and admission are timed; each call overwrites what the previous one set on it.
    request = make_mocked_request("POST", "/v1/chat/completions", headers=headers)

    def one() -> None:
        policy.check(request, route)
        if admit:  # what router/inference/admission.py does once the body's model is read
            found = request.get(SCOPED_KEY)
            assert found is not None
            policy.scoped.admit(found, "chat-a", time.time())

    return one


def _timed(fn: Callable[[], None], calls: int) -> list[float]:
    out = []
    for _ in range(calls):
        t0 = time.perf_counter_ns()
        fn()
        out.append((time.perf_counter_ns() - t0) / 1000.0)
    return out


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main(argv: list[str] | None = None) -> None:
    opts = c.Opts.parse(argv, __doc__ or "")
    calls = CALLS // 4 if opts.quick else CALLS
    arms = {
        "config_key": _arm(_policy(0), CONFIG_KEY, False),
        "config_key_100_scoped": _arm(_policy(SCOPED), CONFIG_KEY, False),
        "scoped_key": _arm(_policy(SCOPED), f"scoped-secret-{SCOPED // 2:04d}-bench", True),
    }
    reps: list[dict[str, Any]] = []
    names = list(arms)
    for rep in range(opts.reps):
        order = names[rep % len(names) :] + names[: rep % len(names)]
        rep_out: dict[str, Any] = {}
        for name in order:
            arms[name]()  # warm
            took = _timed(arms[name], calls)
            rep_out[name] = {"p50_us": _pct(took, 0.5), "p99_us": _pct(took, 0.99)}
        reps.append(rep_out)
        c.log(f"rep {rep}: " + ", ".join(f"{n} p50 {rep_out[n]['p50_us']:.1f} us" for n in names))
    summary = {
        name: {
            "p50_us": statistics.median(r[name]["p50_us"] for r in reps),
            "p99_us": statistics.median(r[name]["p99_us"] for r in reps),
        }
        for name in names
    }
    for name in names[1:]:
        added = statistics.median(r[name]["p50_us"] - r["config_key"]["p50_us"] for r in reps)
        summary[name]["added_p50_ms"] = added / 1000.0
    c.save(
        opts,
        "keys",
        {"calls_per_block": calls, "scoped_keys": SCOPED, "reps_detail": reps, "summary": summary},
    )


def target_rows(d: dict[str, Any]) -> list[tuple[str, str, Any, float, bool, str, int]]:
    """(goal, target text, value, limit, higher is better, unit, digits) for bench/report.py."""
    s = d.get("summary") or {}
    added = (s.get("scoped_key") or {}).get("added_p50_ms")
    return [
        (
            "Added p50 latency of scoped-key checks (issue 35)",
            "<= 0.05 ms",
            added,
            0.05,
            False,
            " ms",
            4,
        )
    ]


if __name__ == "__main__":
    main(sys.argv[1:])
