"""Two processes under torchrun with ZeRO-3 (partitioned weights and optimizer): a run resumed from its
checkpoint-2 ends bitwise where the uninterrupted run ends, also when `auto` must skip a newer checkpoint
that only one rank cannot read (both ranks fall back together)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from checkpoint_helpers import REPO, assert_bitwise_equal, child_env, tail, tiny_config, weights, write_config

from ppokit.checkpoint import complete_checkpoints


def torchrun(config: str, *argv: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           str(REPO / "run_ppo.py"), config, *argv]
    done = subprocess.run(cmd, cwd=REPO, env=child_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, tail(done)
    return done


def test_zero3_two_ranks_resume_is_bitwise_identical(tiny_model_dir, tmp_path):
    config = write_config(tmp_path, tiny_config(tiny_model_dir, tmp_path, sharding="stage3", max_steps=4))
    torchrun(config)
    out = tmp_path / "out"
    checkpoint = out / "checkpoint-2"
    assert sorted(p.name for p in checkpoint.glob("rng_state_*.pt")) == ["rng_state_0.pt", "rng_state_1.pt"]
    # The HF copy holds the gathered weights, not ZeRO-3's empty placeholders.
    shapes = {k: t.shape for k, t in weights(Path(tiny_model_dir)).items()}
    assert {k: t.shape for k, t in weights(checkpoint / "actor").items()} == shapes
    assert {k: t.shape for k, t in weights(out).items()} == shapes
    resumed = tmp_path / "resumed"
    resumed.mkdir()
    shutil.copytree(checkpoint, resumed / "checkpoint-2")
    done = torchrun(config, "--output_dir", str(resumed), "--resume_from_checkpoint", "auto")
    assert "resumed from" in done.stderr, tail(done)
    assert [p.name for p in complete_checkpoints(resumed)] == ["checkpoint-2", "checkpoint-4"]
    assert_bitwise_equal(weights(out), weights(resumed))


def test_zero3_auto_resume_skips_a_checkpoint_one_rank_cannot_read(tiny_model_dir, tmp_path):
    config = write_config(tmp_path, tiny_config(tiny_model_dir, tmp_path, sharding="stage3", max_steps=4))
    torchrun(config)
    out = tmp_path / "out"
    resumed = tmp_path / "resumed"
    resumed.mkdir()
    for name in ("checkpoint-2", "checkpoint-4"):
        shutil.copytree(out / name, resumed / name)
    (resumed / "checkpoint-4" / "rng_state_1.pt").write_bytes(b"")  # only rank 1 reads this file
    done = torchrun(config, "--output_dir", str(resumed), "--resume_from_checkpoint", "auto", "--max_steps", "4")
    assert "rank 1 cannot read checkpoint-4" in done.stderr, tail(done)
    assert "resumed from" in done.stderr and "checkpoint-2" in done.stderr, tail(done)
    assert_bitwise_equal(weights(out), weights(resumed))  # steps 3-4 retrained from checkpoint-2
