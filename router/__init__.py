"""tensor-router: one base URL in front of every local AI backend."""

__version__ = "0.1.0"
