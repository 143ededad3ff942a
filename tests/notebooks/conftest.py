"""Fixtures for the notebook tests: a finished tiny training run (for report / VisualDL checks)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from ppokit.args import load_arguments
from ppokit.session import Session
from ppokit.tasks import get


def distinct_chars(prompts, responses, **fields):
    """Share of distinct characters: varies from sample to sample, so the reward curve moves."""
    return [len(set(r)) / max(len(r), 1) for r in responses]


def write_jsonl(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


@pytest.fixture(scope="session")
def tiny_run(tiny_model_dir, tmp_path_factory) -> SimpleNamespace:
    """A 4-step GRPO run of the tiny model with VisualDL on, evaluation at steps 2 and 4, samples every step."""
    root = tmp_path_factory.mktemp("tiny-run")
    rows = get("arithmetic").generate(24, seed=7)
    args = load_arguments(None, overrides=dict(
        actor_model_name_or_path=tiny_model_dir,
        train_datasets=write_jsonl(root / "train.jsonl", rows[:20]),
        eval_datasets=write_jsonl(root / "eval.jsonl", rows[20:]),
        rl_algorithm="grpo", global_batch_size=2, rollout_n=4, global_mini_batch_size=2,
        per_device_train_batch_size=8, max_dec_len=8, max_prompt_len=64, max_length=128, learning_rate=1e-3,
        max_steps=4, logging_steps=1, do_eval=True, eval_steps=2, eval_rollout_n=2, eval_temperature=1.0,
        output_dir=str(root / "out"), logging_dir=str(root / "vdl_log"), report_to=["visualdl"],
        save_strategy="no", disable_tqdm=True, seed=5,
    ))
    session = Session(args, reward_functions=[distinct_chars])
    history = session.train()
    return SimpleNamespace(out=root / "out", vdl=root / "vdl_log", history=history, args=args)
