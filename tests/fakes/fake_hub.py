"""A local imitation of the Hugging Face hub for the download tests: the API paths
`huggingface_hub` calls (`/api/models`, `/api/models/{repo}[/revision/{rev}]`) and the file
route `/{repo}/resolve/{rev}/{path}`, with LFS files redirected to a second server (the
"CDN") as the real hub does. Both run in the test's event loop on 127.0.0.1.

Switches: `wrong_bytes` (paths served with other bytes), `redirect` (path -> a Location),
`rate` (bytes per second for the big file), `listing_extra` (raw siblings, e.g. `../x`).
`seen` records (server, method, path, Authorization, Range) of every request.
"""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestServer

COMMIT = "0123456789abcdef0123456789abcdef01234567"
GATED_COMMIT = "fedcba9876543210fedcba9876543210fedcba98"
TOKEN = "hf_test_token_0123456789"


def blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass
class FakeRepo:
    id: str
    commit: str
    files: dict[str, bytes]
    lfs: set[str]
    gated: str | bool = False
    license: str = "apache-2.0"


def tiny_repos() -> dict[str, FakeRepo]:
    big = bytes(range(256)) * 4096  # 1 MiB
    return {
        "acme/tiny": FakeRepo(
            "acme/tiny",
            COMMIT,
            {
                "config.json": b'{"arch": "tiny"}\n',
                "README.md": b"# tiny\n",
                "weights/model.gguf": b"GGUF" + bytes(range(200)) * 50,
                "big.gguf": big,
            },
            {"weights/model.gguf", "big.gguf"},
        ),
        "acme/gated": FakeRepo(
            "acme/gated",
            GATED_COMMIT,
            {"model.gguf": b"GGUF-gated" * 100},
            {"model.gguf"},
            gated="manual",
            license="llama3",
        ),
    }


@dataclass
class FakeHub:
    repos: dict[str, FakeRepo] = field(default_factory=tiny_repos)
    wrong_bytes: set[str] = field(default_factory=set)
    redirect: dict[str, str] = field(default_factory=dict)
    rate: int | None = None  # bytes/s for files over 64 KiB (pause, cancel and restart tests)
    listing_extra: list[dict[str, Any]] = field(default_factory=list)
    seen: list[tuple[str, str, str, str | None, str | None]] = field(default_factory=list)
    hub: TestServer | None = None
    cdn: TestServer | None = None

    @property
    def endpoint(self) -> str:
        assert self.hub is not None
        return f"http://127.0.0.1:{self.hub.port}"

    async def start(self) -> FakeHub:
        hub_app, cdn_app = web.Application(), web.Application()
        hub_app.router.add_get("/api/models", self._search)
        hub_app.router.add_get("/api/models/{owner}/{name}", self._info)
        hub_app.router.add_get("/api/models/{owner}/{name}/revision/{rev}", self._info)
        hub_app.router.add_route("*", "/{owner}/{name}/resolve/{rev}/{path:.+}", self._resolve)
        cdn_app.router.add_route("*", "/blobs/{sha}", self._blob)
        for app, name in ((hub_app, "hub"), (cdn_app, "cdn")):
            app.middlewares.append(self._recorder(name))
        self.hub, self.cdn = (
            TestServer(hub_app, host="127.0.0.1"),
            TestServer(cdn_app, host="127.0.0.1"),
        )
        await self.hub.start_server()
        await self.cdn.start_server()
        return self

    async def close(self) -> None:
        for server in (self.hub, self.cdn):
            if server is not None:
                await server.close()

    def _recorder(self, name: str) -> Any:
        @web.middleware
        async def record(request: web.Request, handler: Any) -> web.StreamResponse:
            self.seen.append(
                (
                    name,
                    request.method,
                    request.path,
                    request.headers.get("Authorization"),
                    request.headers.get("Range"),
                )
            )
            return await handler(request)

        return record

    def requests_to(self, name: str) -> list[tuple[str, str, str, str | None, str | None]]:
        return [s for s in self.seen if s[0] == name]

    # -- API ---------------------------------------------------------------------------

    async def _search(self, request: web.Request) -> web.Response:
        term = request.query.get("search", "")
        limit = int(request.query.get("limit", "1000"))
        found = [r for r in self.repos.values() if term in r.id]
        rows = [
            {
                "id": r.id,
                "modelId": r.id,
                "downloads": 10,
                "likes": 1,
                "gated": r.gated,
                "tags": ["gguf"],
                "pipeline_tag": "text-generation",
            }
            for r in found
        ]
        return web.json_response(rows[:limit])

    def _repo(self, request: web.Request) -> FakeRepo:
        repo = self.repos.get(f"{request.match_info['owner']}/{request.match_info['name']}")
        if repo is None:
            raise web.HTTPNotFound(headers={"X-Error-Code": "RepoNotFound"})
        rev = request.match_info.get("rev", "main")
        if rev not in ("main", repo.commit):
            raise web.HTTPNotFound(headers={"X-Error-Code": "RevisionNotFound"})
        return repo

    async def _info(self, request: web.Request) -> web.Response:
        repo = self._repo(request)
        siblings = [self._sibling(repo, path, data) for path, data in repo.files.items()]
        return web.json_response(
            {
                "id": repo.id,
                "modelId": repo.id,
                "sha": repo.commit,
                "private": False,
                "gated": repo.gated,
                "tags": ["gguf"],
                "cardData": {"license": repo.license},
                "siblings": siblings + self.listing_extra,
            }
        )

    def _sibling(self, repo: FakeRepo, path: str, data: bytes) -> dict[str, Any]:
        row: dict[str, Any] = {"rfilename": path, "size": len(data), "blobId": blob_id(data)}
        if path in repo.lfs:
            row["lfs"] = {
                "size": len(data),
                "sha256": hashlib.sha256(data).hexdigest(),
                "pointerSize": 134,
            }
        return row

    # -- files -------------------------------------------------------------------------

    def _allowed(self, repo: FakeRepo, request: web.Request) -> None:
        if repo.gated and request.headers.get("Authorization") != f"Bearer {TOKEN}":
            raise web.HTTPForbidden(headers={"X-Error-Code": "GatedRepo"})

    async def _resolve(self, request: web.Request) -> web.StreamResponse:
        repo = self._repo(request)
        self._allowed(repo, request)
        path = request.match_info["path"]
        data = repo.files.get(path)
        if data is None:
            raise web.HTTPNotFound(headers={"X-Error-Code": "EntryNotFound"})
        headers = {"X-Repo-Commit": repo.commit, "ETag": f'"{blob_id(data)}"'}
        if path in self.redirect:
            raise web.HTTPFound(self.redirect[path], headers=headers)
        if path in repo.lfs:
            sha = hashlib.sha256(data).hexdigest()
            assert self.cdn is not None
            headers.update({"X-Linked-Etag": f'"{sha}"', "X-Linked-Size": str(len(data))})
            raise web.HTTPFound(f"http://127.0.0.1:{self.cdn.port}/blobs/{sha}", headers=headers)
        return await self._send(request, self._served(path, data), headers)

    def _served(self, path: str, data: bytes) -> bytes:
        return bytes(len(data)) if path in self.wrong_bytes else data

    async def _blob(self, request: web.Request) -> web.StreamResponse:
        for repo in self.repos.values():
            for path, data in repo.files.items():
                if hashlib.sha256(data).hexdigest() == request.match_info["sha"]:
                    return await self._send(request, self._served(path, data), {})
        raise web.HTTPNotFound()

    async def _send(
        self, request: web.Request, data: bytes, headers: dict[str, str]
    ) -> web.StreamResponse:
        start, status = 0, 200
        wanted = request.headers.get("Range", "")
        if wanted.startswith("bytes=") and wanted.endswith("-"):
            start, status = int(wanted[6:-1]), 206
            headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
        body = data[start:]
        response = web.StreamResponse(
            status=status, headers={**headers, "Content-Length": str(len(body))}
        )
        await response.prepare(request)
        if request.method == "HEAD":
            return response
        step = 16 * 1024
        for offset in range(0, len(body), step):
            await response.write(body[offset : offset + step])
            if self.rate is not None and len(data) > 64 * 1024:
                await asyncio.sleep(step / self.rate)
        await response.write_eof()
        return response
