"""--print_config applies the checks the run applies at start-up, and DAPO's overlong buffer scales with
max_dec_len (issue 15 #6, #14)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ppokit.algos.advantages import overlong_penalty
from ppokit.args import ConfigError, load_arguments

ROOT = Path(__file__).resolve().parents[2]
GRPO = str(ROOT / "config" / "grpo_argument.json")


def print_config(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "run_ppo.py", *argv, "--print_config"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})


def test_shipped_config_with_dapo_never_penalises_short_answers():
    args = load_arguments(GRPO, argv=["--rl_algorithm", "dapo"])
    assert args.enable_overlong_reward_buffer and args.max_dec_len == 32
    assert args.overlong_reward_buffer == 6  # a fifth of max_dec_len, as verl's DAPO recipe
    lengths = torch.tensor([1, 5, 20, 26, 29, 32])
    penalty = overlong_penalty(lengths, args.max_dec_len, args.overlong_reward_buffer, args.overlong_penalty_factor)
    assert penalty[:4].tolist() == [0.0, 0.0, 0.0, 0.0]  # up to max_dec_len - buffer = 26: no penalty
    assert penalty[4].item() == pytest.approx(-0.5) and penalty[5].item() == -1.0
    assert any("overlong_reward_buffer=6" in note for note in args.notes)


def test_overlong_buffer_scales_and_a_given_buffer_is_kept():
    long = dict(rl_algorithm="dapo", rollout_n=2, per_device_train_batch_size=2, max_dec_len=4096, max_prompt_len=64, max_length=8192)
    assert load_arguments(overrides=long).overlong_reward_buffer == 819
    assert load_arguments(overrides={**long, "overlong_reward_buffer": 256}).overlong_reward_buffer == 256
    mine = load_arguments(overrides={"enable_overlong_reward_buffer": True, "max_dec_len": 100})
    assert mine.overlong_reward_buffer == 20
    assert load_arguments(overrides={"max_dec_len": 100}).overlong_reward_buffer == 256  # shaping off: untouched


def test_a_buffer_as_long_as_the_response_is_refused():
    with pytest.raises(ConfigError, match=r"overlong_reward_buffer=32 .* max_dec_len=32"):
        load_arguments(overrides={"rl_algorithm": "dapo", "max_dec_len": 32, "overlong_reward_buffer": 32})


def test_print_config_refuses_lengths_that_do_not_fit():
    done = print_config(GRPO, "--max_dec_len", "300")
    assert done.returncode == 2 and done.stdout == ""
    assert "max_prompt_len + max_dec_len = 256 + 300 = 556 exceeds max_length=512" in done.stderr
    assert "Traceback" not in done.stderr


def test_print_config_checks_the_model_position_limit(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "llama", "max_position_embeddings": 256}))
    done = print_config(GRPO, "--actor_model_name_or_path", str(model))
    assert done.returncode == 2, done.stderr
    assert "max_length=512 exceeds the model's 256 positions" in done.stderr
