"""A WHERE clause built one condition at a time, its parameters kept in step with the `?`s."""

from __future__ import annotations

from typing import Any


class Where:
    def __init__(self) -> None:
        self.terms: list[str] = []
        self.params: list[Any] = []

    def add(self, term: str, *params: Any) -> None:
        self.terms.append(term)
        self.params.extend(params)

    def given(self, term: str, value: Any) -> None:
        """`term` with its one `?` bound to `value`, unless the filter left it out (None)."""
        if value is not None:
            self.add(term, value)

    def clause(self) -> str:
        """` WHERE a AND b`, or nothing when no condition was added."""
        return f" WHERE {' AND '.join(self.terms)}" if self.terms else ""
