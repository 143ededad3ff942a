"""The in-process judge on a tiny random model (own weights, eval, no grad, batched, repeatable), and the judge
inside a training step: its counts and cost in the step's metrics, its verdicts in samples.jsonl."""

from __future__ import annotations

import json

import pytest
import torch

from ppokit.args import load_arguments
from ppokit.rewards import NamedReward, RewardError
from ppokit.rewards.judge import JudgeReward
from ppokit.rewards.judge.clients import JudgeReply, LocalJudge
from ppokit.rewards.judge.templates import load_template


def conversations(n: int) -> list[list[dict]]:
    return [[{"role": "user", "content": f"Is {i} + {i} = {2 * i}? Verdict: yes or no"}] for i in range(n)]


def test_local_judge_has_its_own_frozen_weights(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    trained = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    judge = LocalJudge(tiny_model_dir, max_new_tokens=4, device="cpu")
    ours = {p.data_ptr() for p in judge.model.parameters()}
    assert not ours & {p.data_ptr() for p in trained.parameters()}  # same files, separate tensors
    assert not judge.model.training and not any(p.requires_grad for p in judge.model.parameters())
    with torch.no_grad():
        next(trained.parameters()).add_(1.0)  # training the policy cannot move the judge
    assert not torch.equal(next(trained.parameters()), next(judge.model.parameters()))


def test_greedy_judging_repeats_batches_and_leaves_the_rng(tiny_model_dir):
    judge = LocalJudge(tiny_model_dir, max_new_tokens=6, batch_size=3, device="cpu")
    calls = []
    generate = judge.model.generate
    judge.model.generate = lambda **kw: calls.append(kw["input_ids"].shape[0]) or generate(**kw)
    state = torch.get_rng_state()
    first = judge.complete(conversations(7))
    assert calls == [3, 3, 1]  # several prompts per generate call
    assert torch.equal(torch.get_rng_state(), state)  # the trainer's random stream is not moved
    again = LocalJudge(tiny_model_dir, max_new_tokens=6, batch_size=7, device="cpu").complete(conversations(7))
    assert [r.text for r in first] == [r.text for r in again]  # greedy: same verdicts, any batching
    assert all(r.tokens > 0 and r.error is None for r in first)


def test_sampled_judging_is_seeded_and_leaves_the_rng(tiny_model_dir):
    a = LocalJudge(tiny_model_dir, max_new_tokens=6, temperature=1.0, seed=3, device="cpu")
    b = LocalJudge(tiny_model_dir, max_new_tokens=6, temperature=1.0, seed=3, device="cpu")
    state = torch.get_rng_state()
    assert [r.text for r in a.complete(conversations(3))] == [r.text for r in b.complete(conversations(3))]
    assert torch.equal(torch.get_rng_state(), state)


def test_judge_model_key_loads_a_local_judge_and_an_unparsable_verdict_stops_the_step(tiny_model_dir, tmp_path):
    from ppokit.rewards import build_reward_functions, compute_rewards

    args = load_arguments(overrides={"judge_model": tiny_model_dir, "judge_max_new_tokens": 3})
    fns = build_reward_functions(args)
    assert [f.name for f in fns] == ["judge"] and isinstance(fns[0].fn.client, LocalJudge)
    with pytest.raises(RewardError, match="unparsed verdicts?.*reward_on_error: skip_group"):
        compute_rewards(fns, ["2+2?"], ["4"], [{"label": "4", "source": "t.jsonl:1"}])


class Canned:
    name = "canned"

    def complete(self, conversations):
        out = []
        for messages in conversations:
            text = messages[-1]["content"]
            answer = text.split("Answer to grade:\n", 1)[1].rsplit("\n\nRate the answer", 1)[0]
            score = min(10, 1 + answer.count("a"))
            out.append(JudgeReply(text=f"{answer.count('a')} letters a.\nScore: {score}", tokens=11))
        return out


def test_a_training_step_logs_judge_metrics_and_verdicts(tiny_model_dir, tmp_path):
    from ppokit.session import Session

    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps({"src": f"say a {i}:", "tgt": "aaaa"}) + "\n" for i in range(8)))
    out = tmp_path / "out"
    args = load_arguments(overrides=dict(
        actor_model_name_or_path=tiny_model_dir, train_datasets=str(data), rl_algorithm="grpo", global_batch_size=2,
        rollout_n=2, global_mini_batch_size=2, per_device_train_batch_size=4, max_dec_len=6, max_prompt_len=32,
        max_length=64, max_steps=1, kl_loss_coeff=0.0, output_dir=str(out), logging_dir=str(tmp_path / "vdl"),
        seed=1, disable_tqdm=True, save_strategy="no", logging_steps=1, device="cpu"))
    judge = NamedReward(name="judge", fn=JudgeReward(Canned(), load_template("score_10")), locate_errors=False)
    s = Session(args, reward_functions=[judge])
    try:
        metrics = s.step()
    finally:
        s.close()
    assert metrics["reward/judge_unparsed"] == 0 and metrics["reward/judge_errors"] == 0
    assert metrics["judge/tokens"] == 4 * 11 and metrics["judge/calls"] == 4 and metrics["timing/judge_s"] >= 0
    rows = [json.loads(line) for line in (out / "samples.jsonl").read_text().split("\n") if line]
    assert rows and all("Score: " in r["judge_verdict"] for r in rows)
    for r in rows:  # the verdict beside the answer it judged
        assert r["judge_verdict"].startswith(f"{r['response'].count('a')} letters a.")
