"""PPO with a critic learns the trivial task of the GRPO tests on a tiny random model."""

from ppo_helpers import letter_a, make_ppo


def test_ppo_learns_the_letter_a_task(tiny_model_dir, prompts_file, tmp_path):
    s = make_ppo(tiny_model_dir, prompts_file, tmp_path, reward=letter_a, max_steps=20, learning_rate=6e-3,
                 critic_learning_rate=3e-3, kl_coeff=0.01, global_batch_size=16, global_mini_batch_size=16,
                 per_device_train_batch_size=16)
    history = s.train()
    rewards = [h["reward/mean"] for h in history]
    first, last = sum(rewards[:5]) / 5, sum(rewards[-5:]) / 5
    assert last > first + 0.15, rewards
    assert all(h["kl/beta"] == 0.01 for h in history)
    assert history[-1]["kl/reward_kl"] > 0  # the actor moved away from the reference
    assert history[-1]["critic/values_mean"] > 0.1  # the critic follows the rising reward
