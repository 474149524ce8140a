"""vLLM launch options: persisted offline switches that reach the next vLLM launch's env.

The vLLM program is the fake backend behind a wrapper that writes its environment to a file,
so the test reads what a real launch was given; changing an option must unload the running
vLLM runtime (and only it) so the next load gets the new value.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from router.config import Settings
from router.domain import Family
from router.setup import LaunchOptions
from tests.fakes.wrappers import _write_script, write_fake_binary
from tests.support.harness import RouterHarness

OPTS = "/router/v1/site/nodes/backends/launch-options"


def env_recording(h: RouterHarness) -> Path:
    envfile = h.tmp / "vllm.env"
    fake = write_fake_binary(h.bin_dir, "vllm")
    script = f'env > {shlex.quote(str(envfile))}\nexec {shlex.quote(str(fake))} "$@"'
    h.programs["vllm"] = _write_script(h.bin_dir / "env-vllm", script)
    return envfile


def launch_env(path: Path) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
    return dict(pairs)


async def test_change_unloads_vllm_and_the_next_launch_carries_it(harness: RouterHarness) -> None:
    h = harness
    envfile = env_recording(h)
    h.model("va", "vllm", model_param="va.safetensors")
    h.model("art", sdmodel="art.gguf")  # sd-server (image lane): must keep running
    client = await h.start()
    shown = (await client.get(OPTS, params={"backend_id": "vllm"})).json()
    assert shown["options"] == {
        "hf_hub_offline": True,
        "transformers_offline": True,
        "hf_datasets_offline": True,
    }
    assert shown["persisted"] is False
    assert (await client.post("/router/v1/load", json={"model": "va"})).status_code == 200
    assert (await client.post("/router/v1/load", json={"model": "art"})).status_code == 200
    assert launch_env(envfile)["HF_HUB_OFFLINE"] == "1"

    body = {"backend_id": "vllm", "options": {"hf_hub_offline": False}}
    changed = await client.post(OPTS, json=body)
    assert changed.status_code == 200, changed.text
    answer = changed.json()
    assert answer["changed"] is True and answer["options"]["hf_hub_offline"] is False
    assert len(answer["unloaded"]) == 1 and "va" in answer["unloaded"][0]
    families = {v.family for v in h.runtimes.views()}
    assert families == {Family.SDCPP}  # vLLM unloaded, sd-server untouched

    assert (await client.post("/router/v1/load", json={"model": "va"})).status_code == 200
    env = launch_env(envfile)
    assert env["HF_HUB_OFFLINE"] == "0" and env["TRANSFORMERS_OFFLINE"] == "1"
    assert env["HF_DATASETS_OFFLINE"] == "1"

    # The same values again change nothing and unload nothing.
    same = (await client.post(OPTS, json=body)).json()
    assert same["changed"] is False and same["unloaded"] == []
    assert any(v.family is Family.VLLM for v in h.runtimes.views())
    shown = (await client.get(OPTS, params={"backend_id": "vllm"})).json()
    assert shown["persisted"] is True and shown["options"]["hf_hub_offline"] is False

    # Kept across a restart: the file under the data folder.
    await h.close()
    client = await h.start()
    again = (await client.get(OPTS, params={"backend_id": "vllm"})).json()
    assert again["options"]["hf_hub_offline"] is False


async def test_bad_launch_option_requests(harness: RouterHarness) -> None:
    client = await harness.start()
    for params in ({}, {"backend_id": "llama-server"}):
        got = await client.get(OPTS, params=params)
        assert got.status_code == 400 and got.json()["error"]["param"] == "backend_id"
    assert "vllm only" in (await client.get(OPTS, params={"backend_id": "sd"})).text
    for body, param in (
        ({"backend_id": "whisper-server", "options": {"hf_hub_offline": True}}, "backend_id"),
        ({"backend_id": "vllm"}, "options"),
        ({"backend_id": "vllm", "options": {}}, "options"),
        ({"backend_id": "vllm", "options": {"hf_token": "x"}}, "options"),
        ({"backend_id": "vllm", "options": {"hf_hub_offline": "no"}}, "options.hf_hub_offline"),
    ):
        got = await client.post(OPTS, json=body)
        assert got.status_code == 400 and got.json()["error"]["param"] == param, body
    other = await client.get(OPTS, params={"backend_id": "vllm", "node_id": "elsewhere"})
    assert other.status_code == 404


def test_defaults_follow_vllm_env_and_saved_values_win(tmp_path: Path) -> None:
    settings = Settings.model_validate({"vllm": {"env": {"TRANSFORMERS_OFFLINE": "0"}}})
    options = LaunchOptions(tmp_path / "launch-options.json", settings)
    assert options.current() == {
        "hf_hub_offline": True,
        "transformers_offline": False,
        "hf_datasets_offline": True,
    }
    assert options.env_for(Family.LLAMACPP) == {}
    assert options.update({"transformers_offline": True}) is True
    assert json.loads((tmp_path / "launch-options.json").read_text()) == {
        "vllm": {"transformers_offline": True}
    }
    assert options.env_for(Family.VLLM)["TRANSFORMERS_OFFLINE"] == "1"
    (tmp_path / "launch-options.json").write_text("{not json")
    assert LaunchOptions(tmp_path / "launch-options.json", settings).persisted is False
