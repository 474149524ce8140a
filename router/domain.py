"""Vocabulary shared by every layer: lanes, roles, surfaces, backend families.

Kept free of I/O and of imports from the rest of the package so that settings, kcpps,
classify and the backend adapters can all depend on it without cycles.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

MiB = 1024 * 1024  # the unit every *_mb setting is given in


class Lane(StrEnum):
    """A kind of work; each lane has at most one active runtime per node."""

    TEXT = "text"
    IMAGE = "image"
    VOICE = "voice"
    EMBEDDINGS = "embeddings"
    MUSIC = "music"


class Role(StrEnum):
    """What a credential grants. PUBLIC routes need none (health, WebUI shell)."""

    PUBLIC = "public"
    INFERENCE = "inference"
    ADMIN = "admin"
    CLUSTER = "cluster"


class Surface(StrEnum):
    """The API family a route belongs to; it picks the error renderer."""

    OPENAI = "openai"
    ANTHROPIC = "anthropic"
    KOBOLD = "kobold"
    OLLAMA = "ollama"
    LLAMACPP = "llamacpp"  # llama-server's own API (/completion, /tokenize, ...)
    VLLM = "vllm"
    EMBEDDINGS = "embeddings"
    A1111 = "a1111"  # /sdapi/v1
    SDCPP = "sdcpp"  # /sdcpp/v1
    COMFY = "comfy"
    VOICE = "voice"
    MUSIC = "music"
    CONTROL = "control"  # /router/v1/load, unload, shutdown, events, models
    SITE = "site"  # /router/v1/site/...
    NODE = "node"  # /router/v1/node/... (cluster token)
    META = "meta"  # /health, /metrics


class BackendMode(StrEnum):
    """`backend.mode` / `.kcpps` `backend_mode`: which native programs serve a config."""

    KOBOLD = "kobold"
    LLAMA_SDCPP = "llama_sdcpp"
    VLLM = "vllm"


class Family(StrEnum):
    """One native program; a runtime is one supervised process of one family."""

    KOBOLD = "kobold"
    LLAMACPP = "llamacpp"
    SDCPP = "sdcpp"
    WHISPERCPP = "whispercpp"
    VLLM = "vllm"


def family_for(mode: BackendMode, lane: Lane) -> Family | None:
    """The program that serves `lane` under `mode` (DESIGN.md section 4); None = not served."""
    if mode is BackendMode.KOBOLD:
        return Family.KOBOLD
    if mode is BackendMode.VLLM:
        return {
            Lane.TEXT: Family.VLLM,
            Lane.VOICE: Family.VLLM,
            Lane.EMBEDDINGS: Family.VLLM,
        }.get(lane)
    return {
        Lane.TEXT: Family.LLAMACPP,
        Lane.EMBEDDINGS: Family.LLAMACPP,
        Lane.IMAGE: Family.SDCPP,
        Lane.VOICE: Family.WHISPERCPP,
    }.get(lane)


class Priority(StrEnum):
    """A caller's class in the queue: waiting `interactive` requests go before `batch` ones."""

    INTERACTIVE = "interactive"
    BATCH = "batch"


@dataclass(frozen=True, slots=True)
class Caller:
    """Who sent a request, as the queue and the analytics see it: a key's name (never its
    secret), its class and its cap on concurrent requests. `name` is empty for a request that
    no scoped key identifies (no auth configured, or a key from router.yaml)."""

    name: str = ""
    priority: Priority = Priority.INTERACTIVE
    max_concurrent: int | None = None


ANONYMOUS = Caller()
