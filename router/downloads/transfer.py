"""One file's bytes: hub URL -> staging part -> verified -> renamed into the library (S21, S22).

Blocking (a worker thread per running job). The transfer uses httpx2 directly, on the guarded
transport, because `huggingface_hub`'s downloaders write into their own cache or folder layout,
follow redirects themselves and verify after the fact; here every redirect hop is checked,
the token stays on the endpoint's origin, the part file lives in the staging folder and the
hash is computed while the bytes arrive (docs/decisions.md, "Downloads: the byte transfer").
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx2

from router.downloads.hub import REGISTRY, GuardedTransport, Refused, Unreachable
from router.downloads.plan import RepoFile
from router.downloads.ssrf import Origin, next_hop

CHUNK = 1024 * 1024
TRANSFER_TIMEOUT = httpx2.Timeout(60.0, connect=10.0)


class TransferError(Exception):
    """The file could not be fetched (the hub's answer, the network, a refused hop)."""


class VerifyFailed(TransferError):
    """The bytes are not the ones the repository listing promised."""


class Stopped(Exception):
    """The job was paused, cancelled or the router is stopping."""


@dataclass
class Control:
    """Set by the event loop, read by the worker thread between chunks."""

    stop: threading.Event = field(default_factory=threading.Event)
    reason: str = ""

    def request(self, reason: str) -> None:
        self.reason = reason
        self.stop.set()


def new_client() -> httpx2.Client:
    # Redirects by hand (next_hop): each one checked, the token dropped off the endpoint.
    return httpx2.Client(
        transport=GuardedTransport(REGISTRY.check), follow_redirects=False, timeout=TRANSFER_TIMEOUT
    )


class _Hashes:
    def __init__(self, item: RepoFile) -> None:
        self.sha256 = hashlib.sha256()
        self.git = (
            hashlib.sha1(b"blob %d\0" % (item.size or 0)) if item.verify == "git-sha1" else None
        )

    def update(self, chunk: bytes) -> None:
        self.sha256.update(chunk)
        if self.git is not None:
            self.git.update(chunk)


def _hash_existing(part: Path, item: RepoFile, hashes: _Hashes) -> int:
    """Feed the bytes a paused or interrupted transfer left; returns how many."""
    if not part.exists():
        return 0
    if item.size is not None and part.stat().st_size > item.size:
        part.unlink()
        return 0
    done = 0
    with part.open("rb") as f:
        while chunk := f.read(CHUNK):
            hashes.update(chunk)
            done += len(chunk)
    return done


def _open(
    client: httpx2.Client, url: str, endpoint: Origin, headers: dict[str, str], auth: dict[str, str]
) -> httpx2.Response:
    """GET with redirects followed by hand; the token never leaves the endpoint's origin."""
    keep = True
    for hops in range(100):
        sent = {**headers, **(auth if keep else {})}
        try:
            REGISTRY.check(url)  # before httpx2 sees it: a file: URL is refused, not unsupported
        except (Refused, Unreachable) as exc:
            raise TransferError(str(exc)) from None
        response = client.send(client.build_request("GET", url, headers=sent), stream=True)
        if not response.is_redirect:
            return response
        location = response.headers.get("location", "")
        response.close()
        try:
            hop = next_hop(url, location, endpoint, hops)
        except ValueError as exc:
            raise TransferError(str(exc)) from None
        url, keep = hop.url, keep and hop.keep_authorization
    raise TransferError("too many redirects")


def fetch(
    client: httpx2.Client,
    url: str,
    endpoint: Origin,
    auth: dict[str, str],
    item: RepoFile,
    part: Path,
    control: Control,
    on_progress: Callable[[int], None],
) -> str:
    """Fetch `item` into `part` (resuming what is there), verify it, return its SHA-256.
    `on_progress` gets the file's bytes so far."""
    hashes = _Hashes(item)
    done = _hash_existing(part, item, hashes)
    on_progress(done)
    if item.size is not None and done == item.size and done > 0:
        return _verified(item, hashes, done)
    headers = {"Accept-Encoding": "identity"}
    if done:
        headers["Range"] = f"bytes={done}-"
    try:
        with contextlib.closing(_open(client, url, endpoint, headers, auth)) as response:
            if done and response.status_code == 200:  # the range was ignored: start over
                hashes, done = _Hashes(item), 0
                part.unlink(missing_ok=True)
                on_progress(0)
            elif response.status_code not in (200, 206):
                raise TransferError(f"{item.path}: the hub answered {response.status_code}")
            done = _stream(response, part, item, hashes, done, control, on_progress)
    except httpx2.HTTPError as exc:
        raise TransferError(f"{item.path}: {type(exc).__name__} while downloading") from None
    return _verified(item, hashes, done)


def _stream(
    response: httpx2.Response,
    part: Path,
    item: RepoFile,
    hashes: _Hashes,
    done: int,
    control: Control,
    on_progress: Callable[[int], None],
) -> int:
    fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    with os.fdopen(fd, "ab") as out:
        for chunk in response.iter_raw():
            if control.stop.is_set():
                raise Stopped(control.reason)
            if item.size is not None and done + len(chunk) > item.size:
                raise VerifyFailed(f"{item.path}: more bytes than the listed {item.size}")
            out.write(chunk)
            hashes.update(chunk)
            done += len(chunk)
            on_progress(done)
        out.flush()
        os.fsync(out.fileno())
    return done


def _verified(item: RepoFile, hashes: _Hashes, done: int) -> str:
    digest = hashes.sha256.hexdigest()
    if item.size is not None and done != item.size:
        raise VerifyFailed(f"{item.path}: {done} bytes arrived, the listing says {item.size}")
    if item.verify == "sha256" and digest != item.sha256:
        raise VerifyFailed(
            f"{item.path}: SHA-256 {digest[:16]}... is not the listed {str(item.sha256)[:16]}..."
        )
    if hashes.git is not None and hashes.git.hexdigest() != item.blob_id:
        raise VerifyFailed(f"{item.path}: the git blob hash does not match the listing")
    return digest


def promote(part: Path, target: Path, library: Path) -> None:
    """Rename the verified part into place. No folder between the library and the target may
    be a symlink (checked before any folder is made, so none is made outside the library)."""
    relative = target.relative_to(library)
    folder = library
    for name in relative.parts[:-1]:
        folder = folder / name
        if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
            raise TransferError(f"{target.name}: {name!r} on the way is not a plain folder")
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.is_symlink() or (target.exists() and not target.is_file()):
        raise TransferError(f"{target.name}: the target exists and is not a plain file")
    os.replace(part, target)


def remove_tree(folder: Path) -> None:
    """The staging folder of a job that will not continue (no partial file survives)."""
    if not folder.exists():
        return
    for child in sorted(folder.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        with contextlib.suppress(OSError):
            child.rmdir() if child.is_dir() and not child.is_symlink() else child.unlink()
    with contextlib.suppress(OSError):
        folder.rmdir()
