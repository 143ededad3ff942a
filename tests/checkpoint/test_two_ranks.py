"""Two processes under torchrun with ZeRO-3 (partitioned weights and optimizer): a run resumed from its
checkpoint-1 ends bitwise where the uninterrupted run ends, also when `auto` must skip a newer checkpoint
that only one rank cannot read (both ranks fall back together)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from checkpoint_helpers import REPO, assert_bitwise_equal, child_env, tail, tiny_config, weights, write_config

from ppokit.checkpoint import complete_checkpoints


def torchrun(config: str, *argv: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           str(REPO / "run_ppo.py"), config, *argv]
    done = subprocess.run(cmd, cwd=REPO, env=child_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, tail(done)
    return done


@pytest.fixture(scope="module")
def uninterrupted(tiny_model_dir, tmp_path_factory) -> tuple[str, Path]:
    """The uninterrupted 2-step run (4 optimizer steps, a checkpoint after each step) that both resumes must
    end on: (its config, its output_dir). Two steps prove what four did: the resumed step needs the restored
    optimizer moments, LR schedule position, data position and both ranks' RNG to end bitwise equal."""
    folder = tmp_path_factory.mktemp("zero3")
    config = write_config(folder, tiny_config(tiny_model_dir, folder, sharding="stage3", max_steps=2, save_steps=1))
    torchrun(config)
    return config, folder / "out"


def test_zero3_two_ranks_resume_is_bitwise_identical(uninterrupted, tiny_model_dir, tmp_path):
    config, out = uninterrupted
    checkpoint = out / "checkpoint-1"
    assert sorted(p.name for p in checkpoint.glob("rng_state_*.pt")) == ["rng_state_0.pt", "rng_state_1.pt"]
    # The HF copy holds the gathered weights, not ZeRO-3's empty placeholders.
    shapes = {k: t.shape for k, t in weights(Path(tiny_model_dir)).items()}
    assert {k: t.shape for k, t in weights(checkpoint / "actor").items()} == shapes
    assert {k: t.shape for k, t in weights(out).items()} == shapes
    resumed = tmp_path / "resumed"
    resumed.mkdir()
    shutil.copytree(checkpoint, resumed / "checkpoint-1")
    done = torchrun(config, "--output_dir", str(resumed), "--resume_from_checkpoint", "auto")
    assert f"resumed from {resumed / 'checkpoint-1'} at step 1" in done.stderr, tail(done)
    assert [p.name for p in complete_checkpoints(resumed)] == ["checkpoint-1", "checkpoint-2"]
    assert_bitwise_equal(weights(out), weights(resumed))


def test_zero3_auto_resume_skips_a_checkpoint_one_rank_cannot_read(uninterrupted, tmp_path):
    config, out = uninterrupted
    resumed = tmp_path / "resumed"
    resumed.mkdir()
    for name in ("checkpoint-1", "checkpoint-2"):
        shutil.copytree(out / name, resumed / name)
    (resumed / "checkpoint-2" / "rng_state_1.pt").write_bytes(b"")  # only rank 1 reads this file
    done = torchrun(config, "--output_dir", str(resumed), "--resume_from_checkpoint", "auto", "--max_steps", "2")
    assert "rank 1 cannot read checkpoint-2" in done.stderr, tail(done)
    assert f"resumed from {resumed / 'checkpoint-1'} at step 1" in done.stderr, tail(done)
    assert_bitwise_equal(weights(out), weights(resumed))  # step 2 retrained from checkpoint-1
