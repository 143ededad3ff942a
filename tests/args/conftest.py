"""Argument tests start from a single process unless a test sets WORLD_SIZE."""

import pytest


@pytest.fixture(autouse=True)
def _single_process(monkeypatch):
    """Batch derivations read WORLD_SIZE from the launcher's environment."""
    monkeypatch.delenv("WORLD_SIZE", raising=False)
