"""A PPO run resumed from a checkpoint continues as the uninterrupted run: actor, critic, beta, reward stats."""

import torch
from ppo_helpers import distinct_chars, make_ppo, snapshot

from ppokit.checkpoint import resume_into

PPO_STATE = dict(reward=distinct_chars, max_steps=3, normalize_reward=True, kl_coeff=0.1, kl_ctrl_type="adaptive",
                 target_kl=0.01, kl_horizon=10, critic_learning_rate=3e-3)


def test_resumed_ppo_run_matches_the_uninterrupted_one(tiny_model_dir, prompts_file, tmp_path):
    straight = make_ppo(tiny_model_dir, prompts_file, tmp_path / "straight", **PPO_STATE)
    for _ in range(3):
        straight.step()

    first = make_ppo(tiny_model_dir, prompts_file, tmp_path / "run", **PPO_STATE)
    first.step()
    first.step()
    checkpoint = first.save()
    assert (checkpoint / "critic").is_dir() and (checkpoint / "critic_ds").is_dir()
    resumed = make_ppo(tiny_model_dir, prompts_file, tmp_path / "run", **PPO_STATE)
    resume_into(resumed, checkpoint)
    assert resumed.state.kl_ctl.value == first.state.kl_ctl.value != 0.1  # beta moved and came back
    assert resumed.state.reward_normalizer.state_dict() == first.state.reward_normalizer.state_dict()
    resumed.step()

    assert resumed.state.kl_ctl.value == straight.state.kl_ctl.value
    assert resumed.state.reward_normalizer.count == straight.state.reward_normalizer.count == 12
    for mine, theirs in ((resumed.model, straight.model), (resumed.state.critic.model, straight.state.critic.model)):
        a, b = snapshot(mine), snapshot(theirs)
        for k in a:
            torch.testing.assert_close(a[k], b[k], atol=1e-6, rtol=0)
