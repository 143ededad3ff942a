"""A GRPO run scored by the reward server gets exactly the rewards of the same run scored in-process."""

from __future__ import annotations

import json

from server_helpers import reward_server

from ppokit.args import load_arguments
from ppokit.rewards.scorers import build_scorer
from ppokit.rewards.server import create_app
from ppokit.session import Session
from ppokit.tasks import get

TOKEN = "test-token"


def run(model_dir, data, out, steps=4, **reward):
    """(responses, rewards) of every step of a short GRPO run."""
    args = load_arguments(None, overrides=dict(
        actor_model_name_or_path=model_dir, train_datasets=data, rl_algorithm="grpo", global_batch_size=4,
        rollout_n=4, global_mini_batch_size=4, per_device_train_batch_size=16, max_dec_len=24,
        max_prompt_len=64, max_length=128, learning_rate=1e-3, max_steps=steps, seed=3,
        output_dir=str(out), logging_dir=str(out / "vdl"), disable_tqdm=True, save_strategy="no", **reward))
    s = Session(args)
    names = [f.name for f in s.state.reward_fns]
    responses, rewards = [], []
    for _ in range(steps):
        s.step()
        responses.append(s.last_batch.response_texts)
        rewards.append(s.last_batch.scores.tolist())
    s.close()
    return names, responses, rewards


def test_server_rewards_equal_in_process_rule_rewards(tiny_model_dir, tmp_path):
    rows = get("arithmetic").generate(16, seed=0, ops="-")  # answers 0..9: the random model sometimes hits one
    data = tmp_path / "arithmetic.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    names, local_texts, local = run(tiny_model_dir, str(data), tmp_path / "local", use_rule_reward=True)
    assert names == ["rule"]
    with reward_server(create_app(build_scorer(), token=TOKEN)) as url:
        names, served_texts, served = run(tiny_model_dir, str(data), tmp_path / "served", use_rule_reward=False,
                                          use_rm_server=True, reward_server=url, reward_server_token=TOKEN)
    assert names == ["reward_server"]
    assert served_texts == local_texts  # the same run: same seed, same responses, same updates
    assert served == local
    assert sum(x > 0 for step in local for x in step) >= 1, "no response was right: the check would be trivial"
