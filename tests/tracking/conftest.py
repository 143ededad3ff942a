"""Fixtures for the tracking tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    """(output_dir, logging_dir) inside a temporary directory."""
    return tmp_path / "out", tmp_path / "vdl"
