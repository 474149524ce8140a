"""The lending settings route on a real router process (docs/lending.md): the layers, a save
in force without a restart and read back after one, a batch with one bad value changing
nothing, `null` and DELETE back to the config file's values, and the config-load checks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from router.config import SettingsError, load_settings
from router.config.schema import LendingSettings
from tests.support.harness import RouterHarness
from tests.support.router_process import new_router

SETTINGS_PATH = "/router/v1/site/offload/settings"
FILE_VALUES = {"scheduling_backend_depth": 3, "offload_probe_idle": "7s"}


def by_key(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {row["key"]: row for row in body["settings"]}


def effective(body: dict[str, Any]) -> dict[str, Any]:
    return {key: row["effective"] for key, row in by_key(body).items()}


async def current(client: httpx.AsyncClient) -> dict[str, Any]:
    reply = await client.get(SETTINGS_PATH)
    assert reply.status_code == 200, reply.text
    body: dict[str, Any] = reply.json()
    return body


async def test_layers_save_hot_survive_a_restart_and_fall_back(tmp_harness: RouterHarness) -> None:
    router = new_router(tmp_harness, extra={"cluster": FILE_VALUES})
    await router.start()
    async with httpx.AsyncClient(base_url=router.base, timeout=30) as client:
        body = await current(client)
        assert body["hot_reload"] is True
        assert list(by_key(body)) == list(LendingSettings.model_fields)
        depth = by_key(body)["scheduling_backend_depth"]
        assert depth == {
            "key": "scheduling_backend_depth",
            "type": "integer",
            "default": 2,
            "config": 3,
            "saved": None,
            "effective": 3,
            "min": 1,
            "max": 64,
            "description": depth["description"],
        }
        assert depth["description"]
        probe = by_key(body)["offload_probe_idle"]
        assert (probe["type"], probe["default"], probe["config"], probe["effective"]) == (
            "duration",
            5.0,
            7.0,
            7.0,
        )
        assert by_key(body)["offload_hold_for_faster_helper"]["type"] == "boolean"

        batch = {
            "scheduling_backend_depth": 5,
            "scheduling_grant_ttl": "45s",
            "offload_hold_for_faster_helper": False,
        }
        reply = await client.post(SETTINGS_PATH, json={"settings": batch})
        assert reply.status_code == 200, reply.text
        saved = by_key(reply.json())
        assert saved["scheduling_backend_depth"]["saved"] == 5
        assert saved["scheduling_backend_depth"]["effective"] == 5
        assert saved["scheduling_backend_depth"]["config"] == 3
        assert saved["scheduling_grant_ttl"]["effective"] == 45.0
        assert saved["offload_hold_for_faster_helper"]["effective"] is False
        assert effective(await current(client)) == effective(reply.json())
        before = effective(reply.json())
        assert (await client.head(SETTINGS_PATH)).status_code == 200  # reads, never clears
        assert by_key(await current(client))["scheduling_backend_depth"]["saved"] == 5

        # One bad value in a batch of good ones: 400 naming it, and not one key changed.
        for bad, key in (
            (
                {"scheduling_min_samples": 30, "scheduling_backend_depth": 0},
                "scheduling_backend_depth",
            ),
            (
                {"scheduling_min_samples": 30, "offload_restore_delay": "0s"},
                "offload_restore_delay",
            ),
            ({"scheduling_min_samples": 30, "no_such_key": 1}, "no_such_key"),
            (
                {"scheduling_min_samples": 30, "offload_hold_for_faster_helper": "no"},
                "offload_hold_for_faster_helper",
            ),
            (
                {"scheduling_min_samples": 30, "scheduling_sample_window": "60d"},
                "scheduling_sample_window",
            ),
        ):
            reply = await client.post(SETTINGS_PATH, json={"settings": bad})
            assert reply.status_code == 400, reply.text
            assert reply.json()["error"]["param"] == key, reply.text
            assert effective(await current(client)) == before
        assert (await client.post(SETTINGS_PATH, json={"depth": 1})).status_code == 400

    router.kill()
    await router.start()  # the saved values are read back from the store
    async with httpx.AsyncClient(base_url=router.base, timeout=30) as client:
        body = await current(client)
        assert effective(body) == before
        assert by_key(body)["scheduling_backend_depth"]["saved"] == 5

        reply = await client.post(
            SETTINGS_PATH, json={"settings": {"scheduling_backend_depth": None}}
        )
        assert reply.status_code == 200, reply.text
        row = by_key(reply.json())["scheduling_backend_depth"]
        assert (row["saved"], row["effective"]) == (None, 3)  # the config file's value again
        assert by_key(reply.json())["scheduling_grant_ttl"]["effective"] == 45.0

        reply = await client.delete(SETTINGS_PATH)
        assert reply.status_code == 200, reply.text
        rows = by_key(reply.json())
        assert all(row["saved"] is None for row in rows.values())
        assert all(row["effective"] == row["config"] for row in rows.values())
        assert rows["offload_probe_idle"]["effective"] == 7.0


def write_config(tmp_path: Path, cluster: dict[str, Any], **sections: Any) -> Path:
    path = tmp_path / "router.yaml"
    (tmp_path / "kcpps").mkdir(exist_ok=True)
    models = {"config_dir": str(tmp_path / "kcpps")}
    path.write_text(yaml.safe_dump({"cluster": cluster, "models": models, **sections}))
    return path


def test_config_load_refuses_a_depth_of_zero_and_a_window_past_the_retention(
    tmp_path: Path,
) -> None:
    with pytest.raises(SettingsError) as caught:
        load_settings(write_config(tmp_path, {"scheduling_backend_depth": 0}), env={})
    assert caught.value.key == "cluster.scheduling_backend_depth"
    with pytest.raises(SettingsError) as caught:
        load_settings(write_config(tmp_path, {"offload_probe_idle": "0s"}), env={})
    assert caught.value.key == "cluster.offload_probe_idle"
    path = write_config(
        tmp_path, {"scheduling_sample_window": "48h"}, analytics={"raw_retention": "24h"}
    )
    with pytest.raises(SettingsError) as caught:
        load_settings(path, env={})
    assert "scheduling_sample_window" in str(caught.value) and "raw_retention" in str(caught.value)
    path = write_config(
        tmp_path, {"scheduling_sample_window": "12h"}, analytics={"raw_retention": "24h"}
    )
    assert load_settings(path, env={}).cluster.scheduling_sample_window == 12 * 3600.0
