"""The base of every router.yaml section model (router/config/schema.py)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """A settings section: an unknown key is an error (a typo never passes silently), and a
    loaded value never changes (settings are shared by every part of the router)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


__all__ = ["Section"]
