"""GRPO steps and evaluation through the Session with the real vLLM engine (marker vllm)."""

import json

import pytest
from vllm_real import SMALL, TINY, needs_vllm

pytestmark = needs_vllm


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    from ppokit.testing import save_tiny_model

    return save_tiny_model(tmp_path_factory.mktemp("vllm-tiny") / "model", **TINY)


@pytest.fixture()
def small_engines(monkeypatch):
    """vLLM engines with a small KV cache and no compilation (start-up time), otherwise as the Session builds them."""
    from ppokit.rollout import vllm_engine

    real = vllm_engine.vllm_engine_kwargs
    monkeypatch.setattr(vllm_engine, "vllm_engine_kwargs", lambda *a, **k: {**real(*a, **k), **SMALL})


def write_rows(path, start: int, stop: int) -> str:
    path.write_text("".join(json.dumps({"prompt": f"say a {i}:"}) + "\n" for i in range(start, stop)))
    return str(path)


def test_grpo_steps_and_evaluation_through_vllm(tmp_path, tiny_dir, small_engines):
    from ppokit.args import load_arguments
    from ppokit.rollout import VLLMRolloutEngine
    from ppokit.session import Session
    from ppokit.testing import distinct_chars

    overrides = dict(
        actor_model_name_or_path=tiny_dir, train_datasets=write_rows(tmp_path / "train.jsonl", 0, 16),
        eval_datasets=write_rows(tmp_path / "eval.jsonl", 100, 104), rl_algorithm="grpo", rollout_engine="vllm",
        global_batch_size=4, rollout_n=4, global_mini_batch_size=4, per_device_train_batch_size=4, max_dec_len=8,
        max_prompt_len=32, max_length=48, learning_rate=1e-3, kl_loss_coeff=0.0, max_steps=2, bf16=True,
        output_dir=str(tmp_path / "out"), logging_dir=str(tmp_path / "vdl"), seed=1, disable_tqdm=True,
        save_strategy="no", eval_rollout_n=2, eval_temperature=1.0, per_device_eval_batch_size=2,
    )
    session = Session(load_arguments(None, overrides=overrides), reward_functions=[distinct_chars])
    assert isinstance(session.state.rollout_engine, VLLMRolloutEngine)
    for _ in range(2):  # the second rollout runs on the weights synced after the first update
        metrics = session.step()
        assert 0 < metrics["rollout/logprob_diff"] < 0.05  # bf16 engine vs the trainer, after every sync
    evaluation = session.evaluate()
    assert evaluation["eval/prompts"] == 4.0 and "eval/mean@2" in evaluation
