"""The router's own copies of ComfyUI uploads (POST /upload/image), for video workflows.

Files live under `<scratch>/uploads/{image,audio}/<name>`: the folder says the kind, so the
store needs no index and survives a restart. Every name passes `check_upload_name` before it
touches the file system, files are written 0600 through a temporary file and an atomic rename,
and reads refuse symlinks (O_NOFOLLOW) and anything that is not a regular file. Calls are
blocking; handlers run them in a thread.
"""

from __future__ import annotations

import os
import stat
import uuid
from pathlib import Path

from router.comfy.media import check_upload_name
from router.errors import BadRequest, PayloadTooLarge

KINDS = ("image", "audio")


class UploadStore:
    def __init__(self, root: Path, max_bytes: int) -> None:
        self.root = root
        self.max_bytes = max_bytes
        for kind in KINDS:
            (root / kind).mkdir(mode=0o700, parents=True, exist_ok=True)

    def _path(self, kind: str, name: str) -> Path:
        return self.root / kind / check_upload_name(name)

    def save(self, name: str, data: bytes, kind: str) -> None:
        """Keep `data` as `name`, replacing an earlier upload of that name (of either kind)."""
        if kind not in KINDS:
            raise ValueError(f"unknown upload kind {kind!r}")
        if len(data) > self.max_bytes:
            raise PayloadTooLarge(
                f"an upload may be at most {self.max_bytes // (1024 * 1024)} MiB",
                code="upload_too_large",
            )
        target = self._path(kind, name)
        temp = target.with_name(f".{uuid.uuid4().hex}.part")
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(temp, target)
        except BaseException:
            temp.unlink(missing_ok=True)
            raise
        for other in KINDS:
            if other != kind:
                self._path(other, name).unlink(missing_ok=True)

    def load(self, name: str) -> tuple[bytes, str]:
        """(bytes, kind) of a stored upload; BadRequest for a name the router never stored."""
        for kind in KINDS:
            data = self._read(self._path(kind, name))
            if data is not None:
                return data, kind
        raise BadRequest(
            f"the workflow loads {name!r}, which was not uploaded to this router "
            "(POST /upload/image first)",
            code="unknown_media",
        )

    def _read(self, path: Path) -> bytes | None:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except (FileNotFoundError, OSError):
            return None  # missing, or a symlink someone planted (ELOOP)
        with os.fdopen(fd, "rb") as fh:
            info = os.fstat(fh.fileno())
            if not stat.S_ISREG(info.st_mode) or info.st_size > self.max_bytes:
                return None
            return fh.read(self.max_bytes + 1)


def private_dir(path: Path) -> Path:
    """Create (or adopt) a folder only this user can enter; refuse a symlink or a stranger's."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise RuntimeError(f"scratch folder {path} is not a plain directory")
    if info.st_uid != os.geteuid():
        raise RuntimeError(f"scratch folder {path} belongs to another user")
    os.chmod(path, 0o700)
    return path
