"""Family -> adapter. Adapters are stateless, so one shared instance per family."""

from __future__ import annotations

from types import MappingProxyType

from backends.base import Backend
from backends.kobold import KoboldBackend
from backends.llamacpp import LlamaCppBackend
from backends.sdcpp import SdCppBackend
from backends.vllm import VllmBackend
from backends.whispercpp import WhisperCppBackend
from router.domain import Family

ADAPTERS = MappingProxyType(
    {
        Family.KOBOLD: KoboldBackend(),
        Family.LLAMACPP: LlamaCppBackend(),
        Family.SDCPP: SdCppBackend(),
        Family.WHISPERCPP: WhisperCppBackend(),
        Family.VLLM: VllmBackend(),
    }
)


def adapter_for(family: Family) -> Backend:
    """The adapter for `family`; every Family has one (a test checks that)."""
    return ADAPTERS[Family(family)]
