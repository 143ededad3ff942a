"""Two data-parallel ranks (torchrun, gloo, CPU) give the gradient of one big batch (~8 s a stage)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ppokit.engine import free_port


@pytest.mark.parametrize("stage", [0, pytest.param(2, marks=pytest.mark.slow)])
def test_two_ranks_equal_one_big_batch(stage):
    script = Path(__file__).with_name("two_ranks.py")
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT")}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", f"--master_port={free_port()}",
           str(script), str(stage)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    reports = re.findall(r"rank (\d) stage \d max difference", done.stdout)  # ranks' lines may interleave
    assert done.returncode == 0 and sorted(reports) == ["0", "1"], done.stdout[-2000:] + done.stderr[-3000:]
