"""The conversation library (docs/swaps.md, "The conversation library"): digests of the
prompts the router forwards to llama-server, which of them have a saved KV state, and the pure
choices of what to match, keep and save. The backend calls live in router/runtime/kvlibrary.py.
"""

from router.conversations.library import Conversation, Library, Noted, SavedState
from router.conversations.prefix import (
    Candidate,
    Prompt,
    choose_to_keep,
    held_length,
    matches,
    parse,
)

__all__ = [
    "Candidate",
    "Conversation",
    "Library",
    "Noted",
    "Prompt",
    "SavedState",
    "choose_to_keep",
    "held_length",
    "matches",
    "parse",
]
