"""R12: the soak (bench/soak.py) run for two minutes must pass its own checks; and each check
fails on the result it guards against."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench import soak

ROOT = Path(__file__).resolve().parent.parent
SECONDS = 120


@pytest.mark.timeout(SECONDS + 330)
def test_r12_two_minute_soak_passes(tmp_path: Path) -> None:
    out, md = tmp_path / "soak.json", tmp_path / "SOAK.md"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.soak",
            "--seconds",
            str(SECONDS),
            "--json",
            str(out),
            "--report",
            str(md),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=SECONDS + 300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert {c["check"] for c in result["checks"]} == {name for name, _, _ in soak.verdict(result)}
    assert all(c["passed"] for c in result["checks"]), result["checks"]
    assert result["tally"]["ok"] > 100 and result["tally"].get("unload_ok", 0) >= 5
    assert "Verdict: pass." in md.read_text()


def sample(t: float, rss: float = 60.0, fds: int = 30, zombies: list[int] | None = None) -> dict:
    return {"t": t, "rss_mib": rss, "fds": fds, "children": 2, "zombies": zombies or []}


def clean() -> dict[str, Any]:
    return {
        "seconds": 120.0,
        "tally": {"ok": 500, "aborted": 50, "unload_ok": 20},
        "samples": [sample(5.0 * i) for i in range(25)],
        "quiet": {**sample(125.0, fds=24), "after_s": 0.1, "backends": 0},
        "health_after": 200,
        "exit_code": 0,
        "left_after_exit": [],
    }


def failed(result: dict[str, Any]) -> set[str]:
    return {name for name, ok, _ in soak.verdict(result) if not ok}


def test_a_clean_result_passes_every_check() -> None:
    assert failed(clean()) == set()


def spoil(path: str, value: Any) -> dict[str, Any]:
    result = copy.deepcopy(clean())
    *parents, key = path.split(".")
    target = result
    for name in parents:
        target = target[name]
    target[key] = value
    return result


@pytest.mark.parametrize(
    ("result", "check"),
    [
        (spoil("tally.status_502", 1), "no failure beyond the injected ones"),
        (spoil("tally.deadline_exceeded", 1), "no failure beyond the injected ones"),
        (spoil("tally.unload_500", 1), "no failure beyond the injected ones"),
        (spoil("tally.ok", 0), "requests answered"),
        (spoil("quiet.backends", 1), "no backend left after the final unload"),
        (spoil("left_after_exit", [4242]), "nothing outlives the router"),
        (spoil("exit_code", None), "clean exit on SIGTERM"),
        (spoil("health_after", 503), "/health after the soak"),
        (spoil("quiet.fds", 35), "no leaked fd"),
    ],
)
def test_each_check_fails_on_what_it_guards(result: dict[str, Any], check: str) -> None:
    assert failed(result) == {check}


def test_growth_is_measured_after_the_warm_up() -> None:
    result = clean()
    result["samples"][0]["rss_mib"] = result["samples"][1]["rss_mib"] = 40.0  # start-up
    assert failed(result) == set()
    result["quiet"]["rss_mib"] = 70.0  # one high reading is noise: the median of three
    assert failed(result) == set()
    result["samples"][-1]["rss_mib"] = 70.0
    assert failed(result) == {"RSS growth under 10%"}


def test_a_zombie_seen_in_two_samples_is_a_leak() -> None:
    result = clean()
    result["samples"][7]["zombies"] = [77]  # reaped before the next sample: fine
    assert failed(result) == set()
    result["samples"][8]["zombies"] = [77]
    assert failed(result) == {"no lasting zombie"}


def test_a_router_that_never_ran_fails() -> None:
    assert failed({"seconds": 120.0, "exit_code": 1, "left_after_exit": []}) == {"the soak ran"}
