"""Test doubles that run as real programs (see fake_backend.py and wrappers.py)."""
