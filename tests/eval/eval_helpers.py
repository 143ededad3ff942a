"""Tiny sessions with eval data for the evaluation tests."""

from __future__ import annotations

import json
from pathlib import Path

from ppokit.args import load_arguments
from ppokit.session import Session


def write_jsonl(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def prompt_rows(start: int, stop: int) -> list[dict]:
    return [{"src": f"count to {i}:", "tgt": str(i)} for i in range(start, stop)]


class Recorder:
    """A reward function (1.0 for an even number of characters) that remembers what it scored."""

    __name__ = "even_length"

    def __init__(self):
        self.calls: list[tuple[list[str], list[str], list[float]]] = []

    def __call__(self, prompts, responses, **fields):
        rewards = [float(len(r) % 2 == 0) for r in responses]
        self.calls.append((list(prompts), list(responses), rewards))
        return rewards


def tiny_session(model_dir: str, tmp: Path, reward=None, **extra) -> Session:
    tmp.mkdir(parents=True, exist_ok=True)
    overrides = dict(
        actor_model_name_or_path=model_dir, train_datasets=write_jsonl(tmp / "train.jsonl", prompt_rows(0, 16)),
        rl_algorithm="grpo", global_batch_size=4, rollout_n=2, global_mini_batch_size=4,
        per_device_train_batch_size=8, max_dec_len=6, max_prompt_len=32, max_length=64, learning_rate=1e-3,
        max_steps=3, kl_loss_coeff=0.0, output_dir=str(tmp / "out"), logging_dir=str(tmp / "vdl"), seed=3,
        disable_tqdm=True, save_strategy="no", logging_steps=1,
    )
    overrides.update(extra)
    return Session(load_arguments(None, overrides=overrides), reward_functions=[reward or Recorder()])
