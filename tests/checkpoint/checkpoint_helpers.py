"""Shared by the checkpoint tests: a tiny run's config, a deterministic reward file, run_ppo.py as a process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch
from safetensors.torch import load_file

REPO = Path(__file__).resolve().parents[2]
# Variables an in-process Session leaves in os.environ; a child process must pick its own port.
LAUNCH_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
# per-process measurements; async/rows_finished_on_old counts the rows a generation finished after the update offered
# new weights: how fast the update ran against the generation (docs/async.md), not what either computed
VOLATILE = ("timing/", "throughput/", "memory/", "async/rows_finished_on_old")

# A deterministic reward (distinct characters, so advantages are not all zero). With PPOKIT_TEST_BLOCK_AT_CALL=N
# the N-th call writes PPOKIT_TEST_BLOCKED_FILE and waits, so a test can SIGKILL the run at a known point.
REWARD_SOURCE = '''
import os, time
from pathlib import Path

CALLS = [0]


def distinct_chars(prompts, responses, **fields):
    CALLS[0] += 1
    block = os.environ.get("PPOKIT_TEST_BLOCK_AT_CALL")
    if block and CALLS[0] == int(block):
        Path(os.environ["PPOKIT_TEST_BLOCKED_FILE"]).write_text("blocked")
        time.sleep(600)
    return [float(len(set(r))) for r in responses]
'''


def write_reward(folder: Path) -> str:
    path = folder / "reward.py"
    path.write_text(REWARD_SOURCE)
    return f"{path}:distinct_chars"


def write_prompts(folder: Path, n: int = 16) -> str:
    path = folder / "train.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"say a {i}:"}) + "\n" for i in range(n)))
    return str(path)


def tiny_config(model_path: str, folder: Path, **extra) -> dict:
    """A GRPO run of 4 prompts x 4 responses per step on the tiny model, checkpoints every 2 steps."""
    folder.mkdir(parents=True, exist_ok=True)
    config = dict(
        actor_model_name_or_path=model_path, train_datasets=write_prompts(folder), rl_algorithm="grpo",
        reward_functions=write_reward(folder), global_batch_size=4, rollout_n=4, global_mini_batch_size=2,
        per_device_train_batch_size=4, max_dec_len=8, max_prompt_len=32, max_length=64, learning_rate=3e-3,
        lr_scheduler_type="cosine", warmup_ratio=0.2, kl_loss_coeff=0.05, max_steps=10, save_steps=2,
        output_dir=str(folder / "out"), logging_dir=str(folder / "vdl"), seed=3, disable_tqdm=True,
        logging_steps=1,
    )
    config.update(extra)
    return config


def write_config(folder: Path, config: dict) -> str:
    path = folder / "config.json"
    path.write_text(json.dumps(config, indent=1))
    return str(path)


def child_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARS}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    env["OMP_NUM_THREADS"] = "1"
    env.update(extra)
    return env


def run_ppo(config: str, *argv: str, timeout: int = 300, **env) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, str(REPO / "run_ppo.py"), config, *argv], cwd=REPO, env=child_env(**env),
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, tail(done)
    return done


def run_python(script: str, *argv: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, script, *argv], cwd=REPO, env=child_env(), capture_output=True, text=True,
                          timeout=timeout)


def run_and_kill_when(config: str, marker: Path, timeout: float = 300, **env) -> None:
    """Start run_ppo.py, wait until `marker` exists (the run wrote it), then SIGKILL the process."""
    proc = subprocess.Popen([sys.executable, str(REPO / "run_ppo.py"), config], cwd=REPO, env=child_env(**env),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + timeout
    try:
        while not marker.exists():
            if proc.poll() is not None:
                raise AssertionError(f"the run ended (exit {proc.returncode}) before {marker.name}:\n"
                                     f"{proc.stderr.read()[-3000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{marker} did not appear within {timeout} s")
            time.sleep(0.05)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL


def tail(done: subprocess.CompletedProcess, n: int = 3000) -> str:
    return f"exit {done.returncode}\n--- stdout\n{done.stdout[-n:]}\n--- stderr\n{done.stderr[-n:]}"


def metrics_rows(output_dir: Path) -> dict[int, dict]:
    """metrics.jsonl as {step: row} without wall-clock keys; fails on a repeated step."""
    rows: dict[int, dict] = {}
    for line in (output_dir / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        assert row["step"] not in rows, f"step {row['step']} appears twice in {output_dir / 'metrics.jsonl'}"
        rows[row["step"]] = {k: v for k, v in row.items() if k != "time" and not k.startswith(VOLATILE)}
    return rows


def weights(folder: Path) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for f in sorted(folder.glob("*.safetensors")):
        out.update(load_file(f))
    assert out, f"no safetensors in {folder}"
    return out


def max_abs_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k].double() - b[k].double()).abs().max()) for k in a)


def assert_bitwise_equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    differ = [k for k in a if a[k].dtype != b[k].dtype or not torch.equal(a[k], b[k])]
    assert not differ, f"{len(differ)} tensors differ (max abs diff {max_abs_diff(a, b)}), e.g. {differ[:3]}"
