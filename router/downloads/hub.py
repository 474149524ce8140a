"""The Hugging Face hub, through `huggingface_hub.HfApi` (search, repository listing,
revision resolution, file metadata), on an httpx2 client whose transport refuses what S22
forbids before a socket opens.

`huggingface_hub` keeps one HTTP client per process (`set_client_factory`); the guarded factory
is installed once and checks each request against every endpoint registered by a running
download service (one in production; tests run several routers in one process). Calls here
block: the job manager and the handlers run them in threads.
"""

from __future__ import annotations

import base64
import binascii
import functools
import ipaddress
import json
import socket
import threading
from collections.abc import Callable, Mapping
from itertools import islice
from typing import Any, TypeVar

import httpx2
from huggingface_hub import (
    HfApi,
    get_hf_file_metadata,
    get_session,
    hf_hub_url,
    hf_raise_for_status,
    set_client_factory,
)
from huggingface_hub.errors import (
    GatedRepoError,
    HfHubHTTPError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)

from router.downloads.assets import MAX_CANDIDATE_REPOS, hf_uri, matching, search_terms
from router.downloads.names import is_commit
from router.downloads.plan import Access, Repository, split_listing
from router.downloads.ssrf import IPAddress, Policy, literal_address, origin_of, refusal
from router.errors import BadGateway, BadRequest, Forbidden, NotFound, RouterError

API_TIMEOUT = httpx2.Timeout(30.0, connect=10.0)
PROBE_TIMEOUT = 5.0
MAX_SEARCH_LIMIT = 100
MAX_SEARCH_OFFSET = 10_000
_EXPAND = ["downloads", "likes", "gated", "tags", "pipeline_tag", "lastModified"]
_T = TypeVar("_T")


class Refused(Exception):
    """A request S22 forbids: never sent."""


class Unreachable(Exception):
    """The host's name does not resolve (no network, or a DNS failure): nothing to refuse, the
    host cannot be reached, which a 502 says rather than the 403 of a refusal."""


def resolve(host: str, port: int) -> list[IPAddress]:
    literal = literal_address(host)
    if literal is not None:
        return [literal]
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        return []
    return [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]


class _Registry:
    """The policies of the running download services; a request passes if one allows it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._policies: dict[int, Policy] = {}
        self._installed = False

    def add(self, policy: Policy) -> int:
        with self._lock:
            key = max(self._policies, default=0) + 1
            self._policies[key] = policy
            if not self._installed:
                set_client_factory(
                    lambda: httpx2.Client(
                        transport=GuardedTransport(self.check),
                        follow_redirects=True,
                        timeout=API_TIMEOUT,
                    )
                )
                self._installed = True
            return key

    def remove(self, key: int) -> None:
        with self._lock:
            self._policies.pop(key, None)

    def check(self, url: str) -> None:
        origin = origin_of(url)
        addresses = resolve(origin.host, origin.port) if origin.host else []
        if not addresses and origin.host and origin.scheme in ("http", "https"):
            raise Unreachable(
                f"cannot reach {origin.host}: the name does not resolve "
                "(no network connection, or a DNS failure)"
            )
        with self._lock:
            policies = list(self._policies.values())
        reasons = [refusal(url, addresses, p) for p in policies] or ["no download service runs"]
        if all(reason is not None for reason in reasons):
            raise Refused(f"refused {origin.scheme}://{origin.host}: {reasons[0]}")


REGISTRY = _Registry()


class GuardedTransport(httpx2.HTTPTransport):
    """Checks every request (each redirect hop is one) before it connects. DNS is looked up
    here and again by the connection: a name that changes its answer in between (rebinding)
    is not caught; docs/downloads.md says so."""

    def __init__(self, check: Callable[[str], None]) -> None:
        super().__init__()
        self._check = check

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        self._check(str(request.url))
        return super().handle_request(request)


def _hub_call(action: Callable[[], _T], what: str) -> _T:
    """One HfApi call with its errors as the router's own (messages never carry the token)."""
    try:
        return action()
    except Refused as exc:
        raise Forbidden(str(exc), code="download_refused") from None
    except Unreachable as exc:
        raise BadGateway(f"{what}: {exc}", code="hub_unreachable") from None
    except RevisionNotFoundError:
        raise NotFound(f"{what}: no such revision", code="revision_not_found") from None
    except GatedRepoError:
        raise Forbidden(f"{what}: gated; the token has no access", code="gated") from None
    except RepositoryNotFoundError:
        raise NotFound(
            f"{what}: no such repository (or no access)", code="repository_not_found"
        ) from None
    except HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else "?"
        raise BadGateway(f"{what}: the hub answered {status}", code="hub_error") from None
    except httpx2.HTTPError as exc:
        raise BadGateway(
            f"{what}: the hub is unreachable ({type(exc).__name__})", code="hub_unreachable"
        ) from None


class Hub:
    """One endpoint and token. Every method blocks (run it in a thread)."""

    def __init__(self, endpoint: str, token: str | None) -> None:
        self.endpoint = endpoint
        # False, not None: never a token from ~/.cache/huggingface or HF_TOKEN.
        self._token: str | bool = token or False
        self._api = HfApi(endpoint=endpoint, token=self._token, library_name="tensor-router")

    @property
    def has_token(self) -> bool:
        return bool(self._token)

    def auth_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._token}"} if self._token else {}

    def reachable(self) -> tuple[bool, str | None]:
        """One short request to the API (no retries: `list_models` would back off for
        half a minute on a box without network)."""

        def probe() -> None:
            response = get_session().get(
                f"{self.endpoint}/api/models",
                params={"limit": 1},
                headers=self.auth_headers(),
                timeout=PROBE_TIMEOUT,
            )
            hf_raise_for_status(response)

        try:
            _hub_call(probe, "probe")
        except RouterError as err:
            return False, err.message
        return True, None

    def search(self, query: Mapping[str, Any]) -> dict[str, Any]:
        limit, offset = query["limit"], query["offset"]
        params = {k: v for k, v in query.items() if k not in ("limit", "offset")}

        def page() -> list[Any]:
            found = self._api.list_models(**params, limit=offset + limit + 1, expand=_EXPAND)  # type: ignore[arg-type]
            return list(islice(found, offset, offset + limit + 1))

        models = _hub_call(page, "search")
        more = len(models) > limit
        return {
            "results": [_model_row(m) for m in models[:limit]],
            "next_cursor": encode_cursor(offset + limit) if more else None,
        }

    def repository(self, repo_id: str, revision: str | None) -> Repository:
        info = _hub_call(
            lambda: self._api.model_info(
                repo_id, revision=revision, files_metadata=True, securityStatus=True, timeout=30.0
            ),
            repo_id,
        )
        if not is_commit(info.sha):
            raise BadGateway(
                f"{repo_id}: the hub gave no commit for the revision", code="hub_error"
            )
        rows = [
            (s.rfilename, s.size, s.lfs.sha256 if s.lfs else None, s.blob_id)
            for s in info.siblings or []
        ]
        files, refused = split_listing(rows)
        card = info.card_data
        license_ = getattr(card, "license", None) if card is not None else None
        return Repository(
            id=info.id,
            commit=str(info.sha),
            files=files,
            unsafe_names=refused,
            gated=info.gated or False,
            private=bool(info.private),
            license=license_ if isinstance(license_, str) else None,
            flagged=_flagged(info.security_repo_status),
            tags=tuple(info.tags or ()),
        )

    def candidates(self, sha256: str, filename: str) -> list[dict[str, Any]]:
        """Files on the hub whose LFS SHA-256 is `sha256`, from repositories a search for the
        file's name finds (at most MAX_CANDIDATE_REPOS per search term)."""
        seen: set[str] = set()
        found: list[dict[str, Any]] = []
        for term in search_terms(filename):
            for model in _hub_call(functools.partial(self._first_models, term), "search"):
                if model.id in seen:
                    continue
                seen.add(model.id)
                try:
                    repo = self.repository(model.id, None)
                except RouterError:
                    continue  # gated, gone or refused: not a candidate
                found += [
                    {
                        "repository": repo.id,
                        "commit": repo.commit,
                        "path": f.path,
                        "size": f.size,
                        "hf": hf_uri(repo.id, repo.commit, f.path),
                    }
                    for f in matching(repo, sha256)
                ]
            if found:
                break
        return found

    def _first_models(self, term: str) -> list[Any]:
        found = self._api.list_models(search=term, limit=MAX_CANDIDATE_REPOS)
        return list(islice(found, MAX_CANDIDATE_REPOS))

    def file_url(self, repo_id: str, commit: str, path: str) -> str:
        return hf_hub_url(repo_id, path, revision=commit, endpoint=self.endpoint)

    def access(self, repo: Repository, path: str | None) -> Access:
        """Whether the token may read a gated repository (a HEAD on one chosen file)."""
        if not repo.gated or path is None:
            return "not_required"
        url = self.file_url(repo.id, repo.commit, path)
        try:
            _hub_call(lambda: get_hf_file_metadata(url, token=self._token, timeout=30.0), repo.id)
        except Forbidden as err:
            if err.code == "gated":
                return "denied"
            raise
        except NotFound:
            return "denied"
        return "granted"


def _flagged(status: Any) -> tuple[str, ...]:
    if not isinstance(status, dict):
        return ()
    issues = status.get("filesWithIssues") or []
    return tuple(
        i["path"]
        for i in issues
        if isinstance(i, dict)
        and isinstance(i.get("path"), str)
        and i.get("level") in ("unsafe", "caution")
    )


def _model_row(model: Any) -> dict[str, Any]:
    return {
        "id": model.id,
        "downloads": model.downloads,
        "likes": model.likes,
        "gated": model.gated or False,
        "tags": list(model.tags or ()),
        "pipeline_tag": model.pipeline_tag,
        "last_modified": model.last_modified.isoformat() if model.last_modified else None,
    }


def encode_cursor(offset: int) -> str:
    return base64.urlsafe_b64encode(json.dumps({"o": offset}).encode()).decode().rstrip("=")


def decode_cursor(cursor: object) -> int:
    if cursor is None or cursor == "":
        return 0
    try:
        assert isinstance(cursor, str) and len(cursor) < 200
        raw = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        offset = raw["o"]
        assert isinstance(offset, int) and 0 <= offset <= MAX_SEARCH_OFFSET
    except (AssertionError, ValueError, KeyError, TypeError, binascii.Error):
        raise BadRequest("cursor is not one this router gave out", param="cursor") from None
    return offset
