"""Session.evaluate() and evaluation during train() on a tiny random model with a trivial reward."""

from __future__ import annotations

import json
import logging

import pytest
from eval_helpers import Recorder, prompt_rows, tiny_session, write_jsonl

from ppokit.args import ConfigError
from ppokit.training.evaluate import pass_at_k


def grouped(recorder: Recorder) -> dict[str, list[tuple[str, float]]]:
    """{prompt: [(response, reward), ...]} over every call the reward function got."""
    out: dict[str, list] = {}
    for prompts, responses, rewards in recorder.calls:
        for p, r, x in zip(prompts, responses, rewards):
            out.setdefault(p, []).append((r, x))
    return out


def test_eval_prompts_never_come_from_the_training_set(tiny_model_dir, tmp_path, caplog):
    eval_file = write_jsonl(tmp_path / "eval.jsonl", prompt_rows(13, 19))  # 13, 14, 15 are training prompts
    with caplog.at_level(logging.WARNING, logger="ppokit"):
        s = tiny_session(tiny_model_dir, tmp_path, eval_datasets=eval_file)
    assert [r["label"] for r in s.state.eval_records] == ["16", "17", "18"]
    train_prompts = {r["_prompt_text"] for r in s.state.train_records}
    assert not train_prompts & {r["_prompt_text"] for r in s.state.eval_records}
    assert "removed 3 eval prompts that also appear in the training data" in caplog.text


def test_eval_split_ratio_holds_prompts_out_of_training(tiny_model_dir, tmp_path):
    s = tiny_session(tiny_model_dir, tmp_path, eval_split_ratio=0.25)
    evals = {r["label"] for r in s.state.eval_records}
    train = {r["label"] for r in s.state.train_records}
    assert len(evals) == 4 and len(train) == 12 and not evals & train
    assert {r["label"] for r in s.state.loader.records} == train  # the loader draws training prompts only


def test_evaluate_returns_mean_pass_and_accuracy_from_the_rewards(tiny_model_dir, tmp_path):
    eval_file = write_jsonl(tmp_path / "eval.jsonl", prompt_rows(100, 106))
    recorder = Recorder()
    s = tiny_session(tiny_model_dir, tmp_path, reward=recorder, eval_datasets=eval_file, eval_rollout_n=4,
                     eval_temperature=1.0, per_device_eval_batch_size=2, max_evaluate_steps=2)
    metrics = s.evaluate()
    groups = grouped(recorder)
    assert len(groups) == 4 and all(len(g) == 4 for g in groups.values())  # 2 batches x 2 prompts, n = 4
    rewards = [[x for _, x in g] for g in groups.values()]
    assert metrics["eval/prompts"] == 4.0
    assert metrics["eval/mean@4"] == pytest.approx(sum(sum(r) / 4 for r in rewards) / 4)
    assert metrics["eval/accuracy"] == pytest.approx(metrics["eval/mean@4"])  # reward 1/0: correct = reward > 0
    for k in (1, 4):
        expected = sum(pass_at_k(4, int(sum(r)), k) for r in rewards) / 4
        assert metrics[f"eval/pass@{k}"] == pytest.approx(expected)
    assert 0.0 < metrics["eval/mean@4"] < 1.0, "the trivial reward should give a mix of 0 and 1"
    assert "eval/maj@4" not in metrics  # these records have no task whose verifier extracts answers
    logged = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    assert logged[-1]["eval/mean@4"] == metrics["eval/mean@4"]


def test_greedy_eval_repeats_and_sampled_eval_leaves_training_untouched(tiny_model_dir, tmp_path):
    eval_file = write_jsonl(tmp_path / "eval.jsonl", prompt_rows(100, 103))
    recorder = Recorder()
    s = tiny_session(tiny_model_dir, tmp_path / "a", reward=recorder, eval_datasets=eval_file, eval_rollout_n=3,
                     eval_temperature=0.0)
    first = s.evaluate()
    assert all(len({r for r, _ in g}) == 1 for g in grouped(recorder).values())  # greedy: n identical answers
    assert s.evaluate()["eval/mean@3"] == first["eval/mean@3"]
    s.args.eval_temperature = 1.0
    sampled = [s.evaluate()["eval/mean@3"] for _ in range(2)]
    assert sampled[0] == sampled[1]  # sampling is seeded from `seed`: the same model gives the same numbers
    after_eval = s.rollout().response_texts
    fresh = tiny_session(tiny_model_dir, tmp_path / "b", eval_datasets=eval_file)
    assert fresh.rollout().response_texts == after_eval  # evaluating did not move the training RNG


def test_train_evaluates_every_eval_steps_and_at_the_end(tiny_model_dir, tmp_path):
    eval_file = write_jsonl(tmp_path / "eval.jsonl", prompt_rows(100, 104))
    s = tiny_session(tiny_model_dir, tmp_path, eval_datasets=eval_file, do_eval=True, eval_steps=2, max_steps=3,
                     eval_rollout_n=2, eval_temperature=1.0, per_device_eval_batch_size=4)
    history = s.train()
    assert ["eval/pass@2" in h for h in history] == [False, True, True]  # step 2, then the final evaluation
    rows = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "eval/pass@2" in r] == [2, 3]  # once each: no duplicate final eval
    again = s.evaluate()  # after train() closed the files: the run's records are continued, not replaced
    rows = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "reward/mean" in r] == [1, 2, 3]
    assert rows[-1]["eval/pass@2"] == again["eval/pass@2"]


def test_epoch_strategy_evaluates_when_the_prompts_start_over(tiny_model_dir, tmp_path):
    eval_file = write_jsonl(tmp_path / "eval.jsonl", prompt_rows(100, 102))
    s = tiny_session(tiny_model_dir, tmp_path, eval_datasets=eval_file, evaluation_strategy="epoch", max_steps=5,
                     max_dec_len=2)
    history = s.train()  # 16 prompts, 4 per step: epoch 0 ends at step 4
    assert [h["step"] for h in history if "eval/accuracy" in h] == [4, 5]


def test_do_eval_without_eval_prompts_fails_before_training(tiny_model_dir, tmp_path):
    s = tiny_session(tiny_model_dir, tmp_path, do_eval=True)
    with pytest.raises(ConfigError, match="do_eval is on but there are no eval prompts"):
        s.train()
    assert s.global_step == 0
    with pytest.raises(ConfigError, match="set eval_datasets"):
        s.evaluate()
