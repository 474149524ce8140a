"""Tests against real backend binaries (marker `real`); they fail, never skip, when one is missing."""
