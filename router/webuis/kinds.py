"""The backend WebUIs as data: one row per interface a backend ships (docs/webuis.md).

Each kind names the backend family that serves it, the lanes whose configurations are
compatible (in the order a running runtime is looked for), the backend path of its static
files, and the API paths its page may call. `backend_path()` is the one rule that maps a
path under `/router/webuis/<kind>/` onto the backend, or refuses it. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

from router.domain import BackendMode, Family, Lane

PREFIX = "/router/webuis/"
_READ = frozenset({"GET", "HEAD"})
_CALL = frozenset({"GET", "HEAD", "POST"})
_POST = frozenset({"POST"})


@dataclass(frozen=True)
class Api:
    """A backend path the UI's script may call: `path` exactly, or everything under it when
    it ends in '/'."""

    path: str
    methods: frozenset[str] = _CALL

    def covers(self, path: str) -> bool:
        return path.startswith(self.path) if self.path.endswith("/") else path == self.path


@dataclass(frozen=True)
class Kind:
    id: str
    name: str
    family: Family
    mode: BackendMode
    lanes: tuple[Lane, ...]  # compatible config lanes; the first one running is proxied
    ui_path: str  # where the backend serves the UI's files; ends in '/'
    api: tuple[Api, ...]
    # Never forwarded, whatever the method (checked before `api` and the static files).
    denied: tuple[str, ...] = ()


class Refused(Exception):
    """A path the proxy does not forward for this kind (rendered as 403)."""


def _apis(read: tuple[str, ...], call: tuple[str, ...]) -> tuple[Api, ...]:
    return tuple(Api(p, _READ) for p in read) + tuple(Api(p) for p in call)


# llama.cpp's own API as its UI uses it; POST /props (changes server defaults) and the
# /slots/{id} save/restore actions (write files) are not among them.
_LLAMA_API = _apis(
    ("/props", "/slots", "/metrics", "/health", "/models"),
    (
        "/v1/", "/api/v1/", "/completion", "/completions", "/chat/completions", "/infill",
        "/embedding", "/embeddings", "/rerank", "/reranking", "/tokenize", "/detokenize",
        "/apply-template",
    ),
)  # fmt: skip
_OLLAMA = ("/api/generate", "/api/chat", "/api/show")
_KOBOLD_TEXT_API = _apis(
    ("/props", "/slots", "/api/tags", "/api/ps", "/api/version"),
    ("/v1/", "/api/v1/", "/api/extra/", *_OLLAMA),
)
_KOBOLD_IMAGE_API = _apis(
    ("/view", "/history", "/object_info", "/system_stats", "/api/extra/version"),
    ("/sdapi/v1/", "/v1/images/", "/prompt", "/queue", "/history/", "/interrupt", "/upload/"),
)
# KoboldCpp's process-wide controls: never reachable from a backend page.
_KOBOLD_DENIED = ("/api/extra/shutdown", "/api/admin/", "/api/extra/multiplayer/")
_TEXT_SIDE = (Lane.TEXT, Lane.EMBEDDINGS, Lane.VOICE)
_KOBOLD = Family.KOBOLD, BackendMode.KOBOLD
_NATIVE = BackendMode.LLAMA_SDCPP

KINDS: tuple[Kind, ...] = (
    Kind("kobold-lite", "KoboldAI Lite", *_KOBOLD, _TEXT_SIDE, "/", _KOBOLD_TEXT_API,
         _KOBOLD_DENIED),
    Kind("kobold-lcpp", "llama.cpp UI in KoboldCpp", *_KOBOLD, _TEXT_SIDE, "/lcpp/",
         _KOBOLD_TEXT_API, _KOBOLD_DENIED),
    Kind("kobold-sd", "Stable UI in KoboldCpp", *_KOBOLD, (Lane.IMAGE,), "/sdui/",
         _KOBOLD_IMAGE_API, _KOBOLD_DENIED),
    Kind("kobold-music", "Music UI in KoboldCpp", *_KOBOLD, (Lane.MUSIC,), "/musicui/",
         _apis((), ("/api/extra/music/",)), _KOBOLD_DENIED),
    Kind("llama", "llama.cpp server UI", Family.LLAMACPP, _NATIVE,
         (Lane.TEXT, Lane.EMBEDDINGS), "/", _LLAMA_API),
    Kind("sdcpp", "stable-diffusion.cpp UI", Family.SDCPP, _NATIVE, (Lane.IMAGE,), "/",
         _apis(("/v1/models",), ("/sdcpp/v1/", "/sdapi/v1/", "/v1/images/"))),
    # whisper-server's /load swaps the model file the router launched it with: never.
    # Its page posts to the inference path, which the router sets to the OpenAI one.
    Kind("whispercpp", "whisper.cpp server UI", Family.WHISPERCPP, _NATIVE, (Lane.VOICE,),
         "/", (Api("/health", _READ), Api("/inference", _POST),
               Api("/v1/audio/transcriptions", _POST)), ("/load",)),
)  # fmt: skip
BY_ID: MappingProxyType[str, Kind] = MappingProxyType({k.id: k for k in KINDS})


def _denied(kind: Kind, root: str) -> bool:
    return any(root == d or root.startswith(d if d.endswith("/") else d + "/") for d in kind.denied)


def api_path(kind: Kind, root: str, method: str) -> str:
    """`root` when it is one of the kind's API paths for `method` (a page's call to the
    origin's root, bridged by its Referer); raises `Refused` otherwise. Static files are
    never served this way: they are read under the prefix."""
    if not _denied(kind, root):
        for api in kind.api:
            if api.covers(root) and method in api.methods:
                return root
    raise Refused(f"{method} {root} is not one of the {kind.id} interface's API paths")


def backend_path(kind: Kind, tail: str, method: str) -> str:
    """The backend path for `tail` (the part after `/router/webuis/<kind>/`, no leading '/').

    API paths go to the backend root with the methods their rule allows; anything else is
    a read of the UI's static files under `ui_path`. Raises `Refused` otherwise.
    """
    root = "/" + tail
    if _denied(kind, root):
        raise Refused(f"{root} is never forwarded to the {kind.id} backend")
    for api in kind.api:
        if api.covers(root):
            if method not in api.methods:
                raise Refused(f"{method} {root} is not allowed for the {kind.id} interface")
            return root
    if method not in _READ:
        raise Refused(
            f"{method} {root} is not one of the {kind.id} interface's API paths; "
            "other paths are its static files, read with GET"
        )
    return kind.ui_path + tail


__all__ = ["BY_ID", "KINDS", "PREFIX", "Api", "Kind", "Refused", "api_path", "backend_path"]
