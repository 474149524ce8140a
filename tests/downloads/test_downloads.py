"""Hugging Face downloads against a local fake hub (tests/fakes/fake_hub.py): search, repository,
plan, a download with verification, refusals (S21, S22), pause/resume, cancel (issue 13)."""

from __future__ import annotations

import hashlib
import time
from typing import Any

import pytest

from tests.fakes.fake_hub import COMMIT, TOKEN, FakeHub
from tests.support.download_helpers import (
    BASE,
    download_settings,
    library_files,
    wait_bytes,
    wait_job,
)
from tests.support.harness import RouterHarness, free_port, read_sse


async def test_capabilities_search_and_cursor_paging(harness: RouterHarness, hub: FakeHub) -> None:
    client = await harness.start(download_settings(harness, hub))
    caps = (await client.get(f"{BASE}/capabilities")).json()["nodes"][0]
    assert caps["capability"] == {
        "enabled": True,
        "reachable": True,
        "reason": None,
        "endpoint": hub.endpoint,
        "configured_token": False,
    }
    first = (await client.post(f"{BASE}/search", json={"query": "acme", "limit": 1})).json()
    assert [r["id"] for r in first["results"]] == ["acme/tiny"] and first["next_cursor"]
    second = await client.post(
        f"{BASE}/search-page", json={"query": "acme", "limit": 1, "cursor": first["next_cursor"]}
    )
    assert [r["id"] for r in second.json()["results"]] == ["acme/gated"]
    assert second.json()["next_cursor"] is None
    bad = await client.post(f"{BASE}/search-page", json={"cursor": "nonsense!"})
    assert bad.status_code == 400 and "cursor" in bad.text


async def test_repository_resolves_the_revision_and_lists_hashes(
    harness: RouterHarness, hub: FakeHub
) -> None:
    client = await harness.start(download_settings(harness, hub))
    repo = (await client.post(f"{BASE}/repository", json={"repository": "acme/tiny"})).json()
    assert repo["commit"] == COMMIT and repo["license"] == "apache-2.0" and repo["gated"] is False
    files = {f["path"]: f for f in repo["files"]}
    data = hub.repos["acme/tiny"].files["weights/model.gguf"]
    assert files["weights/model.gguf"]["sha256"] == hashlib.sha256(data).hexdigest()
    assert files["weights/model.gguf"]["verify"] == "sha256"
    assert files["config.json"]["verify"] == "git-sha1"
    missing = await client.post(f"{BASE}/repository", json={"repository": "acme/none"})
    assert missing.status_code == 404
    rev = await client.post(
        f"{BASE}/repository", json={"repository": "acme/tiny", "revision": "nope"}
    )
    assert rev.status_code == 404 and "revision" in rev.text


async def test_download_lands_verified_and_is_catalogued(
    harness: RouterHarness, hub: FakeHub
) -> None:
    client = await harness.start(download_settings(harness, hub))
    body = {"repository": "acme/tiny", "files": ["config.json", "weights/*.gguf"]}
    plan = (await client.post(f"{BASE}/plan", json=body)).json()
    assert [f["path"] for f in plan["files"]] == ["config.json", "weights/model.gguf"]
    assert plan["fits"] is True and plan["access"] == "not_required" and not plan["blockers"]
    assert hub.requests_to("cdn") == []  # nothing moved for a plan
    started = await client.post(f"{BASE}/jobs", json=body)
    assert started.status_code == 202, started.text
    job = await wait_job(client, started.json()["id"])
    assert job["state"] == "completed", job
    root = harness.tmp / "library"
    assert library_files(root) == ["acme/tiny/config.json", "acme/tiny/weights/model.gguf"]
    data = hub.repos["acme/tiny"].files["weights/model.gguf"]
    assert (root / "acme/tiny/weights/model.gguf").read_bytes() == data
    lib = (await client.get(f"{BASE}/library")).json()
    rows = {a["path"]: a for a in lib["artifacts"]}
    assert rows["acme/tiny/weights/model.gguf"]["sha256"] == hashlib.sha256(data).hexdigest()
    assert (
        rows["acme/tiny/weights/model.gguf"]["origin"]
        == f"hf://acme/tiny@{COMMIT}/weights/model.gguf"
    )
    assert rows["acme/tiny/config.json"]["verified_by"] == "git-sha1"
    again = (await client.post(f"{BASE}/plan", json=body)).json()
    assert again["files"] == [] and again["skipped"] == ["config.json", "weights/model.gguf"]


async def test_events_stream_progress_with_ids_until_the_end(
    harness: RouterHarness, hub: FakeHub
) -> None:
    hub.rate = 1024 * 1024  # about a second: two progress ticks at least
    client = await harness.start(download_settings(harness, hub))
    job = (
        await client.post(f"{BASE}/jobs", json={"repository": "acme/tiny", "files": ["big.gguf"]})
    ).json()
    async with client.stream("GET", f"{BASE}/jobs/{job['id']}/events") as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        events = await read_sse(response)
    kinds = [e.event for e in events]
    assert kinds[0] == "state" and "file" in kinds and kinds[-1] == "state"
    assert '"completed"' in events[-1].data
    assert any(e.event == "progress" and '"eta_seconds"' in e.data for e in events)
    replay = await client.get(f"{BASE}/jobs/{job['id']}/events", headers={"Last-Event-ID": "1"})
    assert "id: 1\n" not in replay.text and "id: 2\n" in replay.text


async def test_s21_wrong_bytes_fail_the_job_and_nothing_lands(
    harness: RouterHarness, hub: FakeHub
) -> None:
    hub.wrong_bytes = {"weights/model.gguf"}
    client = await harness.start(download_settings(harness, hub))
    job = (
        await client.post(
            f"{BASE}/jobs", json={"repository": "acme/tiny", "files": ["weights/model.gguf"]}
        )
    ).json()
    done = await wait_job(client, job["id"])
    assert done["state"] == "failed" and "SHA-256" in done["error"]
    assert library_files(harness.tmp / "library") == []  # no partial, no staging left


@pytest.mark.parametrize(
    "name", ["../escape.gguf", "/etc/passwd", "a/../../b", "a\\b", "x\x00y", "a//b"]
)
async def test_s21_traversal_names_are_refused(
    harness: RouterHarness, hub: FakeHub, name: str
) -> None:
    hub.listing_extra = [{"rfilename": name, "size": 4}]
    client = await harness.start(download_settings(harness, hub))
    repo = (await client.post(f"{BASE}/repository", json={"repository": "acme/tiny"})).json()
    assert name not in [f["path"] for f in repo["files"]]
    assert [r["path"] for r in repo["refused_names"]] == [name]
    r = await client.post(f"{BASE}/jobs", json={"repository": "acme/tiny", "files": [name]})
    assert r.status_code == 400, r.text
    assert [s for s in hub.seen if "resolve" in s[2]] == []


async def test_s21_a_bad_repository_name_is_refused(harness: RouterHarness, hub: FakeHub) -> None:
    client = await harness.start(download_settings(harness, hub))
    for repo in ("../acme", "acme/tiny/extra", "a b/c", ""):
        r = await client.post(f"{BASE}/plan", json={"repository": repo})
        assert r.status_code == 400, (repo, r.text)
    assert hub.seen == []


async def test_disk_space_refusal_before_any_byte(harness: RouterHarness, hub: FakeHub) -> None:
    settings = download_settings(harness, hub)
    huge = settings.downloads.model_copy(update={"free_space_reserve_gb": 1e9})
    client = await harness.start(settings.model_copy(update={"downloads": huge}))
    plan = (await client.post(f"{BASE}/plan", json={"repository": "acme/tiny"})).json()
    assert plan["fits"] is False and "do not fit" in plan["blockers"][0]
    r = await client.post(f"{BASE}/jobs", json={"repository": "acme/tiny"})
    assert r.status_code == 409 and "do not fit" in r.text
    assert [s for s in hub.seen if "resolve" in s[2]] == [] and hub.requests_to("cdn") == []


async def test_s22_gated_access_and_the_token_stays_on_the_endpoint(
    harness: RouterHarness, hub: FakeHub
) -> None:
    client = await harness.start(download_settings(harness, hub))
    denied = (await client.post(f"{BASE}/plan", json={"repository": "acme/gated"})).json()
    assert denied["gated"] == "manual" and denied["access"] == "denied"
    await harness.close()
    hub.seen.clear()
    client = await harness.start(download_settings(harness, hub, token=TOKEN))
    plan = (await client.post(f"{BASE}/plan", json={"repository": "acme/gated"})).json()
    assert plan["access"] == "granted"
    job = (await client.post(f"{BASE}/jobs", json={"repository": "acme/gated"})).json()
    assert (await wait_job(client, job["id"]))["state"] == "completed"
    assert TOKEN not in str(job)
    stored = b"".join(p.read_bytes() for p in (harness.tmp / "data").glob("router.sqlite*"))
    assert TOKEN.encode() not in stored
    hub_auth = {s[3] for s in hub.requests_to("hub") if "resolve" in s[2]}
    assert hub_auth == {f"Bearer {TOKEN}"}
    assert hub.requests_to("cdn") and all(s[3] is None for s in hub.requests_to("cdn"))


async def _redirected_job(harness: RouterHarness, hub: FakeHub, target: str) -> dict[str, Any]:
    """The finished job of a file the hub redirects to `target`."""
    hub.redirect = {"config.json": target}
    client = await harness.start(download_settings(harness, hub))
    job = (
        await client.post(
            f"{BASE}/jobs", json={"repository": "acme/tiny", "files": ["config.json"]}
        )
    ).json()
    return await wait_job(client, job["id"])


@pytest.mark.parametrize(
    "target",
    [
        "http://169.254.169.254/latest/meta-data",
        "http://10.1.2.3/x",
        "file:///etc/passwd",
        "http://192.168.1.1/x",
    ],
)
async def test_s22_redirects_to_forbidden_addresses_are_refused(
    harness: RouterHarness, hub: FakeHub, target: str
) -> None:
    done = await _redirected_job(harness, hub, target)
    assert done["state"] == "failed" and "refused" in done["error"], done
    assert library_files(harness.tmp / "library") == []


async def test_a_redirect_to_a_name_that_does_not_resolve_cannot_reach_it(
    harness: RouterHarness, hub: FakeHub
) -> None:
    """Issue 36: a network failure, said as one, not as an S22 refusal."""
    done = await _redirected_job(harness, hub, "https://cdn.invalid/x")
    assert done["state"] == "failed" and "cannot reach cdn.invalid" in done["error"], done


async def test_pause_keeps_the_part_and_resume_continues_with_a_range(
    harness: RouterHarness, hub: FakeHub
) -> None:
    hub.rate = 256 * 1024
    client = await harness.start(download_settings(harness, hub))
    job = (
        await client.post(f"{BASE}/jobs", json={"repository": "acme/tiny", "files": ["big.gguf"]})
    ).json()
    await wait_bytes(client, job["id"], 64 * 1024)
    paused = (await client.post(f"{BASE}/jobs/{job['id']}/pause")).json()
    assert paused["state"] == "paused"
    staged = list((harness.tmp / "library/.staging").rglob("*.part"))
    assert len(staged) == 1 and staged[0].stat().st_size > 0
    assert not (harness.tmp / "library/acme/tiny/big.gguf").exists()
    hub.rate = None
    assert (await client.post(f"{BASE}/jobs/{job['id']}/resume")).json()["state"] in (
        "queued",
        "running",
    )
    done = await wait_job(client, job["id"])
    assert done["state"] == "completed", done
    assert (harness.tmp / "library/acme/tiny/big.gguf").read_bytes() == hub.repos[
        "acme/tiny"
    ].files["big.gguf"]
    assert any(s[4] and s[4].startswith("bytes=") for s in hub.requests_to("cdn"))


async def test_cancel_removes_the_staging_and_lands_nothing(
    harness: RouterHarness, hub: FakeHub
) -> None:
    hub.rate = 256 * 1024
    client = await harness.start(download_settings(harness, hub))
    job = (
        await client.post(f"{BASE}/jobs", json={"repository": "acme/tiny", "files": ["big.gguf"]})
    ).json()
    await wait_bytes(client, job["id"], 32 * 1024)
    cancelled = (await client.post(f"{BASE}/jobs/{job['id']}/cancel")).json()
    assert cancelled["state"] == "cancelled"
    assert library_files(harness.tmp / "library") == []
    again = await client.post(f"{BASE}/jobs/{job['id']}/resume")
    assert again.status_code == 409


async def test_unknown_tails_methods_nodes_and_disabled(
    harness: RouterHarness, hub: FakeHub
) -> None:
    client = await harness.start(download_settings(harness, hub))
    assert (await client.get(f"{BASE}/nope")).status_code == 404
    assert (await client.get(BASE)).json()["nodes"][0]["capability"]["enabled"] is True
    assert (await client.post(BASE)).status_code == 405
    assert (await client.get(f"{BASE}/plan")).status_code == 405
    assert (await client.get(f"{BASE}/jobs/unknown")).status_code == 404
    assert (await client.get(f"{BASE}/capabilities?node_id=other")).status_code == 404
    r = await client.post(f"{BASE}/plan", json={"repository": "acme/tiny", "token": "x"})
    assert r.status_code == 400
    await harness.close()
    client = await harness.start(download_settings(harness, hub, enabled=False))
    caps = (await client.get(f"{BASE}/capabilities")).json()["nodes"][0]["capability"]
    assert caps["enabled"] is False and caps["reason"]
    assert (await client.post(f"{BASE}/plan", json={"repository": "acme/tiny"})).status_code == 503


async def test_rescan_drops_gone_files_and_lists_untracked_ones(
    harness: RouterHarness, hub: FakeHub
) -> None:
    client = await harness.start(download_settings(harness, hub))
    job = (
        await client.post(
            f"{BASE}/jobs", json={"repository": "acme/tiny", "files": ["config.json", "README.md"]}
        )
    ).json()
    assert (await wait_job(client, job["id"]))["state"] == "completed"
    root = harness.tmp / "library"
    (root / "acme/tiny/README.md").unlink()
    (root / "acme/tiny/config.json").write_text("edited, longer than before")
    (root / "stray.gguf").write_bytes(b"GGUF")
    report = (await client.post(f"{BASE}/rescan")).json()
    assert report == {
        "checked": 2,
        "missing": ["acme/tiny/README.md"],
        "changed": ["acme/tiny/config.json"],
        "untracked": ["stray.gguf"],
    }
    paths = [a["path"] for a in (await client.get(f"{BASE}/library")).json()["artifacts"]]
    assert paths == ["acme/tiny/config.json"]


async def test_s21_a_symlinked_folder_in_the_library_is_not_followed(
    harness: RouterHarness, hub: FakeHub
) -> None:
    outside = harness.tmp / "outside"
    outside.mkdir()
    (harness.tmp / "library" / "acme").mkdir(parents=True)
    (harness.tmp / "library" / "acme" / "tiny").symlink_to(outside)
    client = await harness.start(download_settings(harness, hub))
    job = (
        await client.post(
            f"{BASE}/jobs", json={"repository": "acme/tiny", "files": ["config.json"]}
        )
    ).json()
    done = await wait_job(client, job["id"])
    assert done["state"] == "failed" and "not a plain folder" in done["error"]
    assert list(outside.iterdir()) == []


async def test_one_transfer_per_job_and_per_target(harness: RouterHarness, hub: FakeHub) -> None:
    hub.rate = 512 * 1024
    client = await harness.start(download_settings(harness, hub))
    first = (
        await client.post(f"{BASE}/jobs", json={"repository": "acme/tiny", "files": ["big.gguf"]})
    ).json()
    busy = await client.post(
        f"{BASE}/jobs", json={"repository": "acme/tiny", "files": ["big.gguf"]}
    )
    assert busy.status_code == 409 and "another job" in busy.text
    second = (
        await client.post(
            f"{BASE}/jobs", json={"repository": "acme/tiny", "files": ["config.json"]}
        )
    ).json()
    assert second["state"] == "queued"  # max_concurrent 1
    assert (await client.post(f"{BASE}/jobs/{second['id']}/pause")).json()["state"] == "paused"
    assert (await client.post(f"{BASE}/jobs/{second['id']}/resume")).json()["state"] == "queued"
    assert (await wait_job(client, first["id"]))["state"] == "completed"
    assert (await wait_job(client, second["id"]))["state"] == "completed"
    gets = [s for s in hub.requests_to("hub") if s[1] == "GET" and s[2].endswith("/config.json")]
    assert len(gets) == 1  # the paused-then-resumed job ran once


async def test_a_finished_job_outlives_the_router_and_its_stream_ends(
    harness: RouterHarness, hub: FakeHub
) -> None:
    client = await harness.start(download_settings(harness, hub))
    job = (
        await client.post(
            f"{BASE}/jobs", json={"repository": "acme/tiny", "files": ["config.json"]}
        )
    ).json()
    assert (await wait_job(client, job["id"]))["state"] == "completed"
    await harness.close()
    client = await harness.start(download_settings(harness, hub))
    assert (await client.get(f"{BASE}/jobs/{job['id']}")).json()["state"] == "completed"
    async with client.stream("GET", f"{BASE}/jobs/{job['id']}/events") as response:
        events = await read_sse(response)
    assert [e.event for e in events] == ["state"] and '"completed"' in events[0].data


async def test_a_graceful_stop_mid_job_resumes_at_the_next_start(
    harness: RouterHarness, hub: FakeHub
) -> None:
    hub.rate = 256 * 1024
    client = await harness.start(download_settings(harness, hub))
    job = (
        await client.post(f"{BASE}/jobs", json={"repository": "acme/tiny", "files": ["big.gguf"]})
    ).json()
    await wait_bytes(client, job["id"], 64 * 1024)
    await harness.close()  # the service stops the transfer; the job stays `running` in the store
    assert list((harness.tmp / "library/.staging").rglob("*.part"))
    hub.rate = None
    client = await harness.start(download_settings(harness, hub))
    done = await wait_job(client, job["id"])
    assert done["state"] == "completed", done
    assert (harness.tmp / "library/acme/tiny/big.gguf").read_bytes() == hub.repos[
        "acme/tiny"
    ].files["big.gguf"]
    assert any(s[4] and s[4].startswith("bytes=") for s in hub.requests_to("cdn"))
    head = await client.head(f"{BASE}/jobs/{job['id']}/events")
    assert head.status_code == 200 and head.headers["content-type"].startswith("text/event-stream")


async def test_an_unreachable_hub_is_reported_not_waited_for(
    harness: RouterHarness, hub: FakeHub
) -> None:
    settings = download_settings(harness, hub)
    closed = settings.downloads.model_copy(update={"endpoint": f"http://127.0.0.1:{free_port()}"})
    client = await harness.start(settings.model_copy(update={"downloads": closed}))
    started = time.monotonic()
    caps = (await client.get(f"{BASE}/capabilities")).json()["nodes"][0]["capability"]
    assert caps["reachable"] is False and "unreachable" in caps["reason"]
    assert time.monotonic() - started < 10
