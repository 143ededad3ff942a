"""A tool task trains in asynchronous mode (issue 37): the shipped tools config (config/grpo_tools_argument.json,
the multiply task, hermes calls) on the tiny model with staleness_threshold 1, two steps, inline and with the
producer thread. A scripted engine calls multiply with the question's operands (the random tiny model never
would), so the tool really runs inside the producer; the answers differ within a group, so the steps learn."""

import re
from pathlib import Path

import pytest
import torch

from ppokit.rollout.base import RolloutOutput
from ppokit.session import Session
from ppokit.tasks.multiply import call_text
from ppokit.training.pipeline import WaitingEngine

CONFIG = Path(__file__).resolve().parents[2] / "config" / "grpo_tools_argument.json"


class AskTheTool:
    """First turn: the hermes call multiply(a, b) for the last question of the context. After the tool's result:
    the result (even rows) or a wrong number (odd rows). Fixed log-probs stand in for the sampler's."""

    def __init__(self, tok):
        self.tok = tok
        self.calls = 0

    def generate(self, prompt_token_ids, sampling):
        rows = []
        for j, ctx in enumerate(prompt_token_ids):
            question = self.tok.decode(ctx).rsplit("What is ", 1)[1]
            if "<tool_response>" in question:
                result = int(re.search(r"<tool_response>\s*(-?\d+)", question).group(1))
                text = f"It is {result if j % 2 == 0 else result + 1}."
            else:
                a, b = map(int, re.match(r"(\d+) times (\d+)", question).groups())
                self.calls += 1
                text = call_text(a, b)
            rows.append(self.tok.encode(text, add_special_tokens=False)[: sampling.max_new_tokens - 1]
                        + [self.tok.eos_token_id])
        return RolloutOutput(list(range(len(rows))), rows, ["stop"] * len(rows),
                             logprobs=[[-1.5] * len(r) for r in rows])

    def update_weights(self, model):
        pass


@pytest.mark.parametrize("producer", ["inline", "thread"])
def test_the_shipped_tool_task_trains_two_asynchronous_steps(tiny_model_dir, tmp_path, monkeypatch, producer):
    monkeypatch.chdir(tmp_path)  # the config's data/multiply/ is generated here
    s = Session.from_json(str(CONFIG), actor_model_name_or_path=tiny_model_dir, global_batch_size=2, rollout_n=2,
                          global_mini_batch_size=2, per_device_train_batch_size=4, max_prompt_len=640,
                          max_dec_len=160, max_length=800, learning_rate=1e-3, max_steps=2, bf16=False, train_data_size=16,
                          staleness_threshold=1, rollout_is="token", async_producer=producer,
                          output_dir=str(tmp_path / "out"), logging_dir=str(tmp_path / "vdl"), report_to=["none"],
                          save_strategy="no", disable_tqdm=True)
    engine = AskTheTool(s.tokenizer)
    s.state.rollout_engine = WaitingEngine(engine, s.pipeline) if producer == "thread" else engine
    before = {k: v.detach().clone() for k, v in s.model.named_parameters()}
    steps = [s.step() for _ in range(2)]
    for i, m in enumerate(steps):
        assert m["tools/calls_per_sample"] == 1.0 and m["tools/errors"] == 0 and m["turns/mean"] == 2.0, m
        assert m["async/version_lag/max"] == i and (s.last_batch.policy_version == 0).all()  # batches 0, 1: version 0
        assert m["reward/mean"] == 0.5 and m["advantages/abs_mean"] > 0  # the even rows answer right
        assert "rollout/is_weight_mean" in m or any(k.startswith("rollout/is") for k in m)
    batch = s.last_batch
    tool = batch.turns[0][1]
    assert tool["role"] == "tool" and "<tool_response>" in tool["text"]
    assert (batch.loss_mask[0, tool["start"]:tool["end"]] == 0).all()  # the tool's tokens are not trained
    assert engine.calls == 3 * 4  # batches 0, 1 and 2 (queued for step 3), 4 rows each
    assert "queue 1 batches (policy versions 1)" in repr(s)
    after = dict(s.model.named_parameters())
    assert any(not torch.equal(before[k], after[k]) for k in before)
    s.close()
