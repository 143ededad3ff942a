"""`run_ppo.py` under 2 processes trains, logs once (rank 0) and resumes exactly from its checkpoint.

Each run takes ~25 s on 2 CPU cores; both tests are slow (`make test-slow`).
"""

import json
import shutil
import subprocess
import sys

import pytest
from dist_helpers import HERE, REPO, clean_env, tail
from safetensors.torch import load_file

STEPS = 3


def write_config(tmp_path, model, data, sharding, algorithm) -> str:
    # PPO: KL in the reward with an adaptive beta (which must stay the same on both ranks); GRPO: a KL loss.
    kl = dict(kl_coeff=0.05, kl_ctrl_type="adaptive") if algorithm == "ppo" else dict(kl_loss_coeff=0.05)
    cfg = dict(
        actor_model_name_or_path=model, train_datasets=data, rl_algorithm=algorithm,
        reward_functions=f"{HERE / 'dist_helpers.py'}:distinct_chars",
        global_batch_size=4, rollout_n=2, global_mini_batch_size=4, per_device_train_batch_size=2,
        max_dec_len=8, max_prompt_len=32, max_length=64, learning_rate=1e-3, lr_scheduler_type="constant",
        max_steps=STEPS, save_steps=2, logging_steps=1, sharding=sharding, seed=3,
        output_dir=str(tmp_path / "out"), logging_dir=str(tmp_path / "vdl"), **kl,
    )
    path = tmp_path / "cfg.json"
    path.write_text(json.dumps(cfg))
    return str(path)


def launch(launcher: str, cfg: str, *script_args: str, log_dir=None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "ppokit.launch", "--launcher", launcher, "--nproc_per_node", "2"]
    cmd += ["--log_dir", str(log_dir)] if log_dir else []
    cmd += ["run_ppo.py", cfg, *script_args]
    return subprocess.run(cmd, env=clean_env(), cwd=REPO, capture_output=True, text=True, timeout=300)


def rows(out_dir) -> list[dict]:
    return [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines()]


def rank_logs(log_dir, rank: int) -> str:
    found = list(log_dir.glob(f"*/attempt_0/{rank}/stderr.log"))
    assert len(found) == 1, list(log_dir.rglob("*"))
    return found[0].read_text()


def check_rank0_only_output(log_dir):
    first, second = rank_logs(log_dir, 0), rank_logs(log_dir, 1)
    # the step lines and the closing summary (the progress bar is drawn only on a terminal: a log file has none)
    assert f"step {STEPS}/{STEPS}" in first and "ppokit: done:" in first and "train:" not in first
    assert "step 1/" not in second and "done:" not in second and "saved " not in second


@pytest.mark.slow
@pytest.mark.parametrize("launcher, sharding, algorithm", [
    ("torchrun", "stage2", "grpo"), ("deepspeed", "stage3", "grpo"), ("torchrun", "stage3", "ppo")])
def test_two_process_run_logs_once_and_resumes_exactly(launcher, sharding, algorithm, tmp_path, tiny_model_dir,
                                                       prompts_file):
    cfg = write_config(tmp_path, tiny_model_dir, prompts_file, sharding, algorithm)
    out = tmp_path / "out"
    done = launch(launcher, cfg, log_dir=tmp_path / "logs" if launcher == "torchrun" else None)
    assert done.returncode == 0, tail(done)
    full = rows(out)
    assert [r["step"] for r in full] == list(range(1, STEPS + 1))  # one row per step, from rank 0 only
    assert len(list((tmp_path / "vdl").iterdir())) == 1  # one VisualDL record file
    assert sorted(p.name for p in (out / "checkpoint-2").glob("rng_state_*.pt")) == ["rng_state_0.pt", "rng_state_1.pt"]
    if launcher == "torchrun":
        check_rank0_only_output(tmp_path / "logs")

    # As if the run had stopped after checkpoint-2: resume it with `auto` and finish the last step.
    again = tmp_path / "again"
    shutil.copytree(out, again)
    shutil.rmtree(again / f"checkpoint-{STEPS}")
    (again / "model.safetensors").unlink()
    done = launch(launcher, cfg, "--output_dir", str(again), "--logging_dir", str(tmp_path / "vdl2"),
                  "--resume_from_checkpoint", "auto")
    assert done.returncode == 0, tail(done)
    assert "resumed from" in done.stderr and "checkpoint-2 at step 2" in done.stderr
    resumed = rows(again)
    assert [r["step"] for r in resumed] == list(range(1, STEPS + 1))
    keys = ["reward/mean", "reward/std", "actor/kl", "actor/grad_norm", "response_length/mean"]
    keys += ["kl/beta", "critic/value_loss"] if algorithm == "ppo" else []
    for key in keys:
        assert resumed[-1][key] == full[-1][key], key
    models = ["model.safetensors"] + ([f"checkpoint-{STEPS}/critic/model.safetensors"] if algorithm == "ppo" else [])
    for name in models:
        a, b = load_file(out / name), load_file(again / name)
        assert all(a[k].shape == b[k].shape and a[k].numel() > 0 for k in a)  # ZeRO-3: gathered, not partitions
        worst = max(float((a[k] - b[k]).abs().max()) for k in a)
        print(f"{launcher} {sharding} {algorithm}: resumed run's {name} differs by {worst:.3g}")
        assert worst == 0.0
