"""Multi-turn batches in training: the loss and its gradient count only the model's tokens, the score sits on the
last model token, and a Session with tools logs tools/* and trains (tiny model, scripted engine)."""

import json

import torch

from ppokit.args import load_arguments
from ppokit.rollout.base import RolloutOutput
from ppokit.session import Session
from ppokit.testing import tiny_causal_lm, tiny_tokenizer
from ppokit.training.actor import actor_loss
from ppokit.training.advantage import with_advantages
from ppokit.training.batch import build_batch
from ppokit.training.update import LossConfig, minibatch_denominators

CALL = '<tool_call>{"name": "multiply", "arguments": {"a": 6, "b": 7}}</tool_call>'


def multi_turn_batch(tok):
    """Two rows: [model 5, tool 4, model 3] and a single turn of 4 model tokens."""
    prompts = [tok.encode("hi", add_special_tokens=False), tok.encode("hello", add_special_tokens=False)]
    r0 = tok.encode("abcdeTOOLxyz", add_special_tokens=False)
    r1 = tok.encode("wxyz", add_special_tokens=False)
    masks = [[1] * 5 + [0] * 4 + [1] * 3, [1] * 4]
    turns = [[{"role": "assistant", "text": "abcde", "start": 0, "end": 5},
              {"role": "tool", "text": "TOOL", "start": 5, "end": 9},
              {"role": "assistant", "text": "xyz", "start": 9, "end": 12}],
             [{"role": "assistant", "text": "wxyz", "start": 0, "end": 4}]]
    batch = build_batch([{"prompt": "hi"}, {"prompt": "hello"}], prompts, ["hi", "hello"], [0, 1], [r0, r1],
                        ["stop", "stop"], tok, loss_masks=masks, turns=turns)
    return batch, prompts, [r0, r1], masks


def test_masks_and_final_answers_of_a_multi_turn_batch():
    tok = tiny_tokenizer()
    batch, _, _, masks = multi_turn_batch(tok)
    assert batch.response_mask[0].tolist() == [1.0] * 12 and batch.response_mask[1].tolist() == [1.0] * 4 + [0.0] * 8
    assert batch.loss_mask[0].tolist() == [float(m) for m in masks[0]]
    assert batch.response_texts == ["xyz", "wxyz"]  # the rewards read the last model turn
    assert batch.model_lengths.tolist() == [8.0, 4.0] and batch.response_lengths.tolist() == [12.0, 4.0]
    trimmed = batch.select([0]).trimmed()
    assert trimmed.loss_mask.shape == trimmed.response_mask.shape


def test_score_on_the_last_model_token_and_returns_across_the_tool_turn():
    tok = tiny_tokenizer()
    batch, _, _, _ = multi_turn_batch(tok)
    batch.scores = torch.tensor([2.0, 1.0])
    args = load_arguments(overrides={"rl_algorithm": "reinforce_plus_plus", "rollout_n": 1, "global_batch_size": 2,
                                     "kl_coeff": 0.0, "gamma": 1.0})
    out = with_advantages(batch, args, beta=0.0)
    assert out.token_rewards[0].nonzero().flatten().tolist() == [11] and out.token_rewards[1, 3] == 1.0
    assert out.returns[0].tolist() == [2.0] * 5 + [0.0] * 4 + [2.0] * 3  # the tool turn does not cut the return
    assert (out.advantages[0, 5:9] == 0).all()


def test_loss_and_gradients_equal_a_hand_built_computation_over_the_model_tokens_only():
    tok = tiny_tokenizer()
    model = tiny_causal_lm(tok, seed=3)
    batch, prompts, responses, masks = multi_turn_batch(tok)
    adv = torch.tensor([[0.7], [-1.3]])
    batch.advantages = adv * batch.loss_mask
    cfg = LossConfig(policy_loss="vanilla", clip_low=0.2, clip_high=0.2, clip_ratio_c=None, agg_mode="token-mean",
                     norm_constant=16, pg_coeff=1.0, kl_coeff=0.0, kl_estimator="k3", entropy_coeff=0.0,
                     clip_range_value=0.2, chunk_size=64)
    denoms = minibatch_denominators(batch.loss_mask)
    assert denoms == (12.0, 2.0)  # 8 + 4 model tokens: the tool turn is not in the denominator
    loss, _ = actor_loss(model, batch, cfg, denoms, torch.float32, torch.device("cpu"))
    params = [p for p in model.parameters() if p.requires_grad]
    grads = torch.autograd.grad(loss, params)
    # by hand: each row alone (no padding), log-probs of its model tokens, -A * ratio (ratio = exp(logp - sg(logp)))
    total = 0.0
    for prompt, resp, mask, a in zip(prompts, responses, masks, adv[:, 0].tolist()):
        ids = torch.tensor([prompt + resp])
        logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1]
        logp = torch.log_softmax(logits.float(), -1).gather(-1, torch.tensor(resp)[:, None])[:, 0]
        own = torch.tensor(mask, dtype=torch.bool)
        total = total + (-a * torch.exp(logp - logp.detach()))[own].sum()
    hand = total / 12.0
    torch.testing.assert_close(loss, hand, rtol=1e-5, atol=1e-6)
    for g, h in zip(grads, torch.autograd.grad(hand, params)):
        torch.testing.assert_close(g, h, rtol=1e-4, atol=1e-6)


class CallThenAnswer:
    """A RolloutEngine that calls multiply(6, 7) in the first turn and answers from the tool's result after."""

    def __init__(self, tok):
        self.tok = tok

    def generate(self, prompt_token_ids, sampling):
        rows = []
        for ctx in prompt_token_ids:
            text = "42 it is." if "<tool_response>" in self.tok.decode(ctx) else "let me see " + CALL + " 41?"
            rows.append(self.tok.encode(text, add_special_tokens=False)[: sampling.max_new_tokens] +
                        [self.tok.eos_token_id])
        return RolloutOutput(list(range(len(rows))), rows, ["stop"] * len(rows))

    def update_weights(self, model):
        pass


def used_the_tool(prompts, responses, conversation):
    """Reward: 1 when the trajectory made a call and the final answer says 42."""
    return [float("42" in r and any(t.get("calls") for t in c)) for r, c in zip(responses, conversation)]


def test_a_session_with_tools_trains_and_logs_tool_metrics(tiny_model_dir, tmp_path):
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"q{i}:"}) + "\n" for i in range(8)))
    args = load_arguments(None, overrides=dict(
        actor_model_name_or_path=tiny_model_dir, train_datasets=str(data), rl_algorithm="grpo", global_batch_size=2,
        rollout_n=2, global_mini_batch_size=2, per_device_train_batch_size=4, max_dec_len=160, max_prompt_len=32,
        max_length=256, learning_rate=1e-3, max_steps=2, kl_loss_coeff=0.0, output_dir=str(tmp_path / "out"),
        logging_dir=str(tmp_path / "vdl"), report_to=["none"], seed=1, disable_tqdm=True, save_strategy="no",
        multi_turn=True, tools="multiply"))
    s = Session(args, reward_functions=[used_the_tool])
    s.state.rollout_engine = CallThenAnswer(s.state.policy.tokenizer)
    before = {k: v.detach().clone() for k, v in s.model.named_parameters()}
    metrics = s.step()
    batch = s.last_batch
    assert metrics["tools/calls_per_sample"] == 1.0 and metrics["turns/mean"] == 2.0 and metrics["tools/errors"] == 0
    assert metrics["tools/response_tokens_per_sample"] > 0 and metrics["reward/used_the_tool"] == 1.0
    tool = batch.turns[0][1]
    assert tool["role"] == "tool" and "<tool_response>\n42\n</tool_response>" in tool["text"]
    assert (batch.loss_mask[0, tool["start"]:tool["end"]] == 0).all() and batch.loss_mask[0, : tool["start"]].all()
    assert (batch.response_mask - batch.loss_mask).sum() == 4 * (tool["end"] - tool["start"])
    assert torch.isfinite(torch.tensor(metrics["actor/pg_loss"]))
    after = dict(s.model.named_parameters())
    assert any(not torch.equal(before[k], after[k]) for k in before) or metrics["advantages/abs_mean"] == 0
    # samples.jsonl / VisualDL rows and s.show(batch) mark the model's and the tool's turns
    from ppokit.training.metrics import sample_rows
    from ppokit.widgets import batch_rows

    row = sample_rows(batch)[0]
    assert row["answer"] == "42 it is." and row["response"].startswith("[model] let me see <tool_call>")
    assert "\n[tool] " in row["response"] and [t["role"] for t in row["turns"]] == ["assistant", "tool", "assistant"]
    assert batch_rows(batch)[0]["response"] == row["response"]


def test_a_session_with_a_verl_tool_config_trains_a_step(tiny_model_dir, tmp_path):
    from test_declare import write_yaml

    data = counter_rows(tmp_path / "train.jsonl")
    args = load_arguments(None, overrides=dict(
        actor_model_name_or_path=tiny_model_dir, train_datasets=data, rl_algorithm="grpo", global_batch_size=2,
        rollout_n=2, global_mini_batch_size=2, per_device_train_batch_size=4, max_dec_len=160, max_prompt_len=32,
        max_length=256, max_steps=1, output_dir=str(tmp_path / "out"), logging_dir=str(tmp_path / "vdl"),
        report_to=["none"], seed=1, disable_tqdm=True, save_strategy="no", multi_turn=True,
        tool_config_path=write_yaml(tmp_path)))
    s = Session(args, reward_functions=[lambda prompts, responses, **kw: [float(len(r) % 3) for r in responses]])
    s.state.rollout_engine = CallCounter(s.state.policy.tokenizer)
    metrics = s.step()
    check_counter_step(s, metrics)


class CallCounter(CallThenAnswer):
    """Calls counter(x=1) in the first turn, answers "done" after the tool's result."""

    def generate(self, prompt_token_ids, sampling):
        call = '<tool_call>{"name": "counter", "arguments": {"x": 1}}</tool_call>'
        rows = [self.tok.encode("done" if "<tool_response>" in self.tok.decode(c) else call,
                                add_special_tokens=False) + [self.tok.eos_token_id] for c in prompt_token_ids]
        return RolloutOutput(list(range(len(rows))), rows, ["stop"] * len(rows))


def counter_rows(path):
    """verl rows of the tool agent, each creating its counter at its own start."""
    rows = [{"prompt": f"q{i}:", "agent_name": "tool_agent", "data_source": "mine",
             "extra_info": {"tools_kwargs": {"counter": {"create_kwargs": {"start": i}}}}} for i in range(4)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def check_counter_step(s, metrics):
    batch = s.last_batch
    texts = [t["calls"][0]["text"] for row in batch.turns for t in row if t.get("calls")]
    # each row's own instance, created with its row's start (create_kwargs): start + 2 * x
    starts = [r["fields"]["extra_info"]["tools_kwargs"]["counter"]["create_kwargs"]["start"] for r in batch.records]
    assert texts == [f"counter={start + 2}" for start in starts]
    assert metrics["tools/calls_per_sample"] == 1.0 and metrics["reward/tool_step"] == 0.5  # execute's step reward
    assert torch.isfinite(torch.tensor(metrics["actor/pg_loss"]))


def test_a_verl_multi_turn_line_with_a_tool_config_yaml_trains_a_step(tiny_model_dir, tmp_path):
    from test_declare import write_yaml

    from ppokit.main_ppo import parse_main_ppo

    A = "actor_rollout_ref."
    data = counter_rows(tmp_path / "train.jsonl")
    args, _, _ = parse_main_ppo([
        f"{A}model.path={tiny_model_dir}", f"data.train_files={data}", f"data.val_files={data}",
        "algorithm.adv_estimator=grpo", "data.train_batch_size=2", f"{A}rollout.n=2",
        f"{A}actor.ppo_mini_batch_size=2", f"{A}actor.ppo_micro_batch_size_per_gpu=4",
        "data.max_prompt_length=32", "data.max_response_length=160", "trainer.total_training_steps=1",
        f"trainer.default_local_dir={tmp_path / 'out'}", "trainer.save_freq=-1", "trainer.logger=[console]",
        f"{A}rollout.multi_turn.enable=True", f"{A}rollout.multi_turn.tool_config_path={write_yaml(tmp_path)}",
        f"{A}rollout.multi_turn.max_assistant_turns=2", f"{A}rollout.multi_turn.format=hermes"])
    assert (args.multi_turn, args.max_assistant_turns, args.rollout_n, args.max_steps) == (True, 2, 2, 1)
    args.logging_dir, args.disable_tqdm = str(tmp_path / "vdl"), True
    s = Session(args, reward_functions=[lambda prompts, responses, **kw: [float(len(r) % 3) for r in responses]])
    assert sorted(s.state.agent.tools) == ["counter"]
    s.state.rollout_engine = CallCounter(s.state.policy.tokenizer)
    check_counter_step(s, s.step())
