"""`run_ppo.py config/grpo_argument.json --rollout_engine vllm` on the bundled model against the hf engine on the
same seed (markers vllm and slow: two 10-step runs, many minutes on 2 cores; `make test-vllm-slow`)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from vllm_real import needs_vllm

pytestmark = [*needs_vllm, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]
STEPS = 10


def run(engine: str, out: Path) -> list[dict]:
    cmd = [sys.executable, "run_ppo.py", "config/grpo_argument.json", "--rollout_engine", engine,
           "--max_steps", str(STEPS), "--do_eval", "false", "--save_steps", "1000", "--output_dir", str(out),
           "--logging_dir", str(out / "vdl"), "--gpu_memory_utilization", "0.12", "--disable_tqdm", "true"]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=3600)
    assert done.returncode == 0, done.stderr[-4000:]
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_grpo_with_vllm_rises_like_the_hf_engine(tmp_path):
    rows = {engine: [r for r in run(engine, tmp_path / engine) if "reward/mean" in r] for engine in ("vllm", "hf")}
    for engine, steps in rows.items():
        assert len(steps) == STEPS, engine
    assert all(r["rollout/logprob_diff"] < 0.06 for r in rows["vllm"])  # after every weight sync
    rewards = {e: [r["reward/mean"] for r in rows[e]] for e in rows}
    for engine, r in rewards.items():  # both learn: the last 3 steps score above the first 3
        assert sum(r[-3:]) > sum(r[:3]), (engine, r)
    # the same learning curve up to sampling noise (different samplers, the same seed)
    assert abs(sum(rewards["vllm"]) - sum(rewards["hf"])) / STEPS < 0.2, rewards
