"""Checkpoints need an output_dir every rank sees (issue #30, fault 7): rank 0 creates the folder all ranks write
into, so a rank on a node without that filesystem is told so, on every rank at once."""

from __future__ import annotations

import pytest

from ppokit.checkpoint import guard as checkpoint_guard
from ppokit.checkpoint.guard import UnsharedOutputDirError, every_rank_sees
from ppokit.errors import PpokitError


def test_a_folder_every_rank_sees_passes(tmp_path):
    every_rank_sees(tmp_path)


def test_a_rank_that_cannot_see_the_folder_is_told_why(tmp_path):
    with pytest.raises(UnsharedOutputDirError, match="shared by all nodes") as info:
        every_rank_sees(tmp_path / ".tmp-checkpoint-3", wait_s=0)
    assert "1 of 1 ranks (this rank" in str(info.value) and isinstance(info.value, PpokitError)


def test_the_ranks_that_see_it_raise_too(tmp_path, monkeypatch):
    """Two ranks, the other one blind: this rank sees the folder but raises the same error instead of waiting for the
    other in the next collective."""
    monkeypatch.setattr(checkpoint_guard, "world_size", lambda: 2)
    monkeypatch.setattr(checkpoint_guard, "barrier", lambda: None)
    monkeypatch.setattr(checkpoint_guard, "all_reduce_sum", lambda *values: [1.0])
    with pytest.raises(UnsharedOutputDirError, match=r"1 of 2 ranks \(another rank, rank 0 reporting\)"):
        every_rank_sees(tmp_path)
