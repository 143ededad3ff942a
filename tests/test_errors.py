"""Every user-facing error derives from ppokit.PpokitError, and run_ppo.py shows each one as a sentence, exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import ppokit
from ppokit.errors import PpokitError

REPO = Path(__file__).resolve().parents[1]


def user_error_classes():
    from ppokit.args import ConfigError
    from ppokit.checkpoint import CheckpointError
    from ppokit.data import DataError
    from ppokit.export import ExportError
    from ppokit.launch import LaunchError
    from ppokit.models import ModelNotFoundError
    from ppokit.paths import PathError
    from ppokit.rewards import RewardError, RewardServerError
    from ppokit.tasks import TaskError
    from ppokit.tracking.report import ReportError

    return [ConfigError, CheckpointError, DataError, ExportError, LaunchError, ModelNotFoundError, PathError,
            RewardError, RewardServerError, TaskError, ReportError]


@pytest.mark.parametrize("cls", user_error_classes(), ids=lambda c: c.__name__)
def test_every_user_error_is_a_ppokit_error(cls):
    assert issubclass(cls, PpokitError) and ppokit.PpokitError is PpokitError


def run(config: dict, tmp_path: Path) -> subprocess.CompletedProcess:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    env = {"PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, str(REPO / "run_ppo.py"), str(path)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)


def base(tiny_model_dir, tmp_path, **extra):
    reward = tmp_path / "reward.py"
    reward.write_text("def distinct(prompts, responses, **fields):\n    return [float(len(set(r))) for r in responses]\n")
    config = dict(actor_model_name_or_path=tiny_model_dir, rl_algorithm="grpo", reward_functions=f"{reward}:distinct",
                  global_batch_size=4, rollout_n=4, global_mini_batch_size=4, max_dec_len=8, max_prompt_len=32,
                  max_length=64, max_steps=1, output_dir=str(tmp_path / "out"), logging_dir=str(tmp_path / "vdl"),
                  save_strategy="no", disable_tqdm=True)
    config.update(extra)
    return config


def test_no_training_data_is_a_sentence_not_a_traceback(tiny_model_dir, tmp_path):
    done = run(base(tiny_model_dir, tmp_path, train_datasets=""), tmp_path)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "error: no training data" in done.stderr and "Traceback" not in done.stderr


def test_do_eval_without_eval_prompts_is_a_sentence(tiny_model_dir, tmp_path):
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps({"src": [f"say {i}"]}) + "\n" for i in range(4)))
    done = run(base(tiny_model_dir, tmp_path, train_datasets=str(data), do_eval=True, eval_steps=1), tmp_path)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "error: do_eval is on but there are no eval prompts" in done.stderr and "Traceback" not in done.stderr
