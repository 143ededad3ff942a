"""verl tests start from a single process unless a test sets WORLD_SIZE."""

import pytest


@pytest.fixture(autouse=True)
def _single_process(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
