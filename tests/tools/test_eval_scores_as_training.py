"""Evaluation scores a tool task's rows by training's rule (issue 36): the final answer, the conversation a reward
function names, and the tools' step rewards (verl's execute reward and calc_reward) — one function for both."""

import json

from test_declare import write_yaml
from test_multi_turn_training import CallCounter

from ppokit.args import load_arguments
from ppokit.session import Session
from ppokit.training import phases
from ppokit.training.evaluate import evaluate


def called_and_done(prompts, responses, conversation):
    """1 when the exchange made a call and the final answer is "done" (needs the conversation)."""
    return [float(r == "done" and any(t.get("calls") for t in c)) for r, c in zip(responses, conversation)]


def test_a_tool_tasks_eval_reward_equals_its_training_reward_on_the_same_rows(tiny_model_dir, tmp_path):
    data = tmp_path / "train.jsonl"
    starts = [0, 8]  # the counter ends at start + 2: calc_reward is 1 only for the second row (>= 10)
    data.write_text("".join(json.dumps({"prompt": f"q{s}:", "agent_name": "tool_agent", "data_source": "mine",
                                        "extra_info": {"tools_kwargs": {"counter": {"create_kwargs": {"start": s}}}}})
                            + "\n" for s in starts))
    args = load_arguments(None, overrides=dict(
        actor_model_name_or_path=tiny_model_dir, train_datasets=str(data), rl_algorithm="grpo", global_batch_size=2,
        rollout_n=2, global_mini_batch_size=2, per_device_train_batch_size=4, max_dec_len=160, max_prompt_len=32,
        max_length=256, max_steps=1, output_dir=str(tmp_path / "out"), logging_dir=str(tmp_path / "vdl"),
        report_to=["none"], seed=1, disable_tqdm=True, save_strategy="no", multi_turn=True,
        tool_config_path=write_yaml(tmp_path), eval_rollout_n=2, eval_temperature=1.0,
        per_device_eval_batch_size=2))
    s = Session(args, reward_functions=[called_and_done])
    s.state.rollout_engine = CallCounter(s.state.policy.tokenizer)  # the same rows every time it is asked
    s.state.eval_records = list(s.state.train_records)
    samples: list = []
    metrics = evaluate(s.producer, samples=samples)
    sampling = phases.sampling_params(s.args, n=2, temperature=1.0)
    trained = phases.score(s.producer, phases.generate(s.producer, s.producer.eval_records, sampling, 0))
    by_prompt = {r["_prompt_text"]: i for i, r in enumerate(s.state.eval_records)}
    eval_rewards = sorted((by_prompt[x["prompt"]], x["reward"]) for x in samples)
    assert [r for _, r in eval_rewards] == trained.scores.tolist()
    # by hand: 1 (called and answered "done") + 0.5 (execute's step reward) + calc_reward (start + 2 >= 10)
    assert trained.scores.tolist() == [1.5, 1.5, 2.5, 2.5]
    assert trained.reward_terms["tool_step"].tolist() == [0.5, 0.5, 1.5, 1.5]
    assert metrics["eval/mean@2"] == 2.0


def test_a_tool_task_trains_with_stale_rollouts(tiny_model_dir, tmp_path):
    from test_multi_turn_training import counter_rows

    args = load_arguments(None, overrides=dict(
        actor_model_name_or_path=tiny_model_dir, train_datasets=counter_rows(tmp_path / "train.jsonl"),
        rl_algorithm="grpo", global_batch_size=2, rollout_n=2, global_mini_batch_size=2,
        per_device_train_batch_size=4, max_dec_len=160, max_prompt_len=32, max_length=256, max_steps=3,
        output_dir=str(tmp_path / "out"), logging_dir=str(tmp_path / "vdl"), report_to=["none"], seed=1,
        disable_tqdm=True, save_strategy="no", multi_turn=True, tool_config_path=write_yaml(tmp_path),
        staleness_threshold=1))  # the scripted engine gives no log-probs: rollout_is stays off
    s = Session(args, reward_functions=[called_and_done])
    s.state.rollout_engine = CallCounter(s.state.policy.tokenizer)
    lags = []
    for _ in range(3):
        metrics = s.step()
        assert metrics["tools/calls_per_sample"] == 1.0 and metrics["reward/tool_step"] >= 0.5
        lags.append(metrics["async/version_lag/max"])
    assert lags == [0.0, 1.0, 1.0]
