"""Multi-turn runs resume exactly mid-run (issue 27): a checkpoint after step 2, resumed, gives step 3's weights and
metrics bit for bit, tool turns and their loss mask included."""

import json

import torch
from test_multi_turn_training import CallThenAnswer

from ppokit.args import load_arguments
from ppokit.session import Session

VOLATILE = ("timing/", "throughput/", "memory/")


REWARD = '''import re


def by_question(prompts, responses, **_):
    """1 for odd question numbers: scores vary over the batch, so REINFORCE++ has advantages to train on."""
    return [float(int(re.findall(r"q(\\d+):", p)[-1]) % 2) for p in prompts]
'''


def multi_turn_session(model_dir, tmp_path, **extra):
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"q{i}:"}) + "\n" for i in range(8)))
    (tmp_path / "reward.py").write_text(REWARD)
    args = load_arguments(None, overrides=dict(
        actor_model_name_or_path=model_dir, train_datasets=str(data), rl_algorithm="reinforce_plus_plus",
        global_batch_size=4, rollout_n=1, global_mini_batch_size=2, per_device_train_batch_size=2, max_dec_len=160,
        max_prompt_len=32, max_length=256, learning_rate=1e-3, max_steps=4, output_dir=str(tmp_path / "out"),
        logging_dir=str(tmp_path / "vdl"), report_to=["none"], seed=1, disable_tqdm=True, multi_turn=True,
        tools="multiply", reward_functions=f"{tmp_path / 'reward.py'}:by_question", **extra))
    s = Session(args)
    s.state.rollout_engine = CallThenAnswer(s.state.policy.tokenizer)  # scripted: the same turns every run
    return s


def weights(s):
    return {k: v.detach().clone() for k, v in s.model.state_dict().items()}


def test_multi_turn_resume_continues_exactly(tiny_model_dir, tmp_path):
    s = multi_turn_session(tiny_model_dir, tmp_path)
    s.step()
    s.step()
    s.save()
    third = s.step()
    expected = weights(s)
    assert third["tools/calls_per_sample"] == 1.0 and third["advantages/abs_mean"] > 0
    s.close()
    r = Session.resume(str(tmp_path / "out"))
    r.state.rollout_engine = CallThenAnswer(r.state.policy.tokenizer)
    assert r.global_step == 2
    again = r.step()
    got = weights(r)
    assert all(torch.equal(expected[k], got[k]) for k in expected)
    assert {k: v for k, v in third.items() if not k.startswith(VOLATILE)} == {
        k: v for k, v in again.items() if not k.startswith(VOLATILE)}
    r.close()
