"""deploy/grafana/tensor-router.json (docs/observability.md, "Dashboard"): a file Grafana
imports as is, whose every query names a series the router really exports. The names are
read from a running router's /metrics (its Metrics registry and collectors), not a list kept
by hand, so a renamed or removed metric fails here."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from tests.support.harness import RouterHarness

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "tensor-router.json"
NAME = re.compile(r"\btensor_router_[a-z0-9_]+")
# The series each metric type puts in the exposition (prometheus_client's names).
SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "gauge": ("",),
}


def exported(metrics_text: str) -> set[str]:
    """Every series name the exposition can carry, from its # TYPE lines (a labelled metric
    with no sample yet still declares itself)."""
    names: set[str] = set()
    for family in text_string_to_metric_families(metrics_text):
        names.update(family.name + suffix for suffix in SUFFIXES.get(family.type, ("",)))
    return names


def panels(items: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in items:
        yield panel
        yield from panels(panel.get("panels", []))


def queries(dashboard: dict[str, Any]) -> list[str]:
    found = [t["expr"] for p in panels(dashboard["panels"]) for t in p.get("targets", [])]
    for variable in dashboard["templating"]["list"]:
        found.append(variable["definition"])
    return found


def unknown(exprs: list[str], names: set[str]) -> set[str]:
    return {name for expr in exprs for name in NAME.findall(expr)} - names


async def test_every_metric_the_dashboard_queries_is_exported(harness: RouterHarness) -> None:
    client = await harness.start()
    reply = await client.get("/metrics")
    assert reply.status_code == 200
    names = exported(reply.text)
    assert "tensor_router_queue_wait_seconds_bucket" in names  # the parse found the registry
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = queries(dashboard)
    assert len(exprs) >= 15 and all(NAME.search(e) for e in exprs), exprs
    assert unknown(exprs, names) == set()
    # And the check can fail: a name the router does not export is caught.
    assert unknown(["rate(tensor_router_tokens_total[5m])"], names) == {
        "tensor_router_tokens_total"
    }


def test_the_dashboard_imports_as_is() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert isinstance(dashboard["schemaVersion"], int) and dashboard["uid"] == "tensor-router"
    (source,) = dashboard["__inputs"]
    assert (source["name"], source["pluginId"]) == ("DS_PROMETHEUS", "prometheus")
    ids = [p["id"] for p in panels(dashboard["panels"])]
    assert len(ids) == len(set(ids))
    for panel in panels(dashboard["panels"]):
        assert set(panel["gridPos"]) == {"h", "w", "x", "y"}
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
        for target in panel.get("targets", []):  # every query on the imported data source
            assert target["datasource"]["uid"] == "${DS_PROMETHEUS}", panel["title"]
    titles = " ".join(p["title"] for p in panels(dashboard["panels"]))
    for topic in ("lane", "Load", "Queue wait", "device", "KV cache", "Tokens per model"):
        assert topic in titles, topic
    # Issue 36: per-model tokens, each counter on a panel of its own model breakdown.
    exprs = queries(dashboard)
    for series in ("prompt", "completion", "cached_prompt"):
        name = f"tensor_router_{series}_tokens_total"
        assert any(name in e and "by (model)" in e for e in exprs), name
