"""Ollama's `/api/pull` for Hugging Face GGUF repositories (`hf.co/{owner}/{repo}:{quant}`):
which files a name means, what configuration is written for them, and the progress records
Ollama's clients read. Pure: router/api/inference/ollama_manage.py runs the download through the
downloads service (router/downloads) and writes the file.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from router.downloads import Job
from router.downloads.plan import RepoFile
from router.errors import BadRequest

PULLABLE = (
    "only Hugging Face GGUF repositories can be pulled here: "
    "hf.co/{owner}/{repository}[:{quantization}], e.g. hf.co/bartowski/Qwen2.5-0.5B-Instruct-GGUF:Q4_K_M"
)
DEFAULT_QUANT = "Q4_K_M"  # Ollama's choice when a hf.co name has no tag
_HOSTS = ("hf.co/", "huggingface.co/")
_SEGMENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
_QUANT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_SPLIT = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)
_ID_CHARS = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class PullName:
    repo_id: str  # owner/repository
    quant: str | None  # None: the default (Q4_K_M, or the only GGUF)

    @property
    def config_id(self) -> str:
        """The configuration's ID (the .kcpps stem): repository and quantization."""
        name = self.repo_id.split("/", 1)[1]
        stem = f"{name}-{self.quant}" if self.quant else name
        return _ID_CHARS.sub("-", stem).strip("-._")[:128] or "pulled"


def parse_pull_name(name: Any) -> PullName:
    """`hf.co/{owner}/{repo}[:{quant}]` (also `huggingface.co/...`); anything else is refused
    with what can be pulled."""
    if not isinstance(name, str) or not name:
        raise BadRequest(f'"model" must name what to pull; {PULLABLE}', param="model")
    rest = next((name[len(h) :] for h in _HOSTS if name.lower().startswith(h)), None)
    if rest is None:
        raise BadRequest(f"{name[:200]!r} cannot be pulled: {PULLABLE}", param="model")
    path, _, tag = rest.partition(":")
    parts = path.split("/")
    if len(parts) != 2 or not all(_SEGMENT.match(p) for p in parts) or ".." in path:
        raise BadRequest(f"{name[:200]!r} is not a Hugging Face repository: {PULLABLE}")
    if tag and not _QUANT.match(tag):
        raise BadRequest(f"{tag[:64]!r} is not a quantization name such as Q4_K_M")
    quant = None if tag.lower() in ("", "latest") else tag
    return PullName(f"{parts[0]}/{parts[1]}", quant)


def choose_files(files: Sequence[RepoFile], name: PullName) -> tuple[RepoFile, ...]:
    """The GGUF of the asked quantization (every part of a split one), projectors excluded."""
    ggufs = [
        f
        for f in files
        if f.path.lower().endswith(".gguf") and "mmproj" not in f.path.rsplit("/", 1)[-1].lower()
    ]
    if not ggufs:
        raise BadRequest(f"{name.repo_id} has no GGUF file to pull")
    quant = name.quant or DEFAULT_QUANT
    chosen = [f for f in ggufs if _has_quant(f.path, quant)]
    if not chosen and name.quant is None and len(_models(ggufs)) == 1:
        chosen = ggufs
    models = _models(chosen)
    if len(models) != 1:
        found = ", ".join(sorted({_quant_of(f.path) for f in ggufs})) or "none"
        what = "several files match" if chosen else "no file matches"
        raise BadRequest(
            f"{what} quantization {quant!r} in {name.repo_id}; name one of: {found}",
            param="model",
        )
    return tuple(sorted(chosen, key=lambda f: f.path))


def first_part(files: Sequence[RepoFile]) -> RepoFile:
    """The file a backend is given: the only one, or part 1 of a split GGUF."""
    return min(files, key=lambda f: f.path)


def _models(files: Sequence[RepoFile]) -> set[str]:
    """Distinct models among GGUF files (the parts of one split GGUF are one model)."""
    return {_SPLIT.sub(".gguf", f.path) for f in files}


def _has_quant(path: str, quant: str) -> bool:
    stem = _SPLIT.sub("", path.rsplit("/", 1)[-1]).removesuffix(".gguf")
    tokens = re.split(r"[-.]", stem.lower())
    q = quant.lower()
    return q in tokens or stem.lower().endswith(q)


def _quant_of(path: str) -> str:
    stem = _SPLIT.sub("", path.rsplit("/", 1)[-1])
    stem = stem[: -len(".gguf")] if stem.lower().endswith(".gguf") else stem
    return re.split(r"[-.]", stem)[-1]


def kcpps(model_path: str) -> dict[str, Any]:
    """The configuration written for a pulled model: the file; the rest are backend defaults."""
    return {"model_param": model_path}


# ---- progress records (Ollama's api.ProgressResponse) --------------------------------------


def status(text: str) -> dict[str, Any]:
    return {"status": text}


def file_progress(item: RepoFile, completed: int) -> dict[str, Any]:
    """One file's progress, as Ollama reports a layer: `pulling <digest>`."""
    digest = item.sha256 or item.blob_id or item.path
    total = item.size or 0
    return {
        "status": f"pulling {digest[:12]}",
        "digest": f"sha256:{digest}" if item.sha256 else digest,
        "total": total,
        "completed": min(completed, total) if total else completed,
    }


def already_served() -> list[dict[str, Any]]:
    """The records of a pull of a model that is already here: nothing to fetch, success."""
    return [
        status("pulling manifest"),
        status("verifying sha256 digest"),
        status("writing manifest"),
        status("success"),
    ]


def job_records(job: Job, seen: dict[str, int]) -> list[dict[str, Any]]:
    """What changed in `job` since the last call (`seen`: path -> bytes reported)."""
    out = []
    for index, item in enumerate(job.files):
        if item.path in job.done_paths:
            done = item.size or seen.get(item.path, 0)
        elif job.current == index:
            done = job.file_done
        else:
            continue
        if seen.get(item.path) != done:
            seen[item.path] = done
            out.append(file_progress(item, done))
    return out
