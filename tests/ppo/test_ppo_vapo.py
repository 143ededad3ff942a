"""rl_algorithm vapo on the PPO path: value pretraining (pretrain_critic_steps), decoupled length-adaptive GAE,
clip-higher, token-level loss and the positive-example LM loss, on a tiny model."""

import pytest
import torch
from ppo_helpers import changed, make_ppo, rollout_with_advantages, snapshot

from ppokit.algos.advantages import decoupled_gae, length_adaptive_lambda
from ppokit.algos.masked import masked_whiten


def signed_chars(prompts, responses, **fields):
    """Distinct characters minus 3: some responses score > 0 (positive examples), some do not."""
    return [float(len(set(r))) - 3.0 for r in responses]


def make_vapo(tiny_model_dir, prompts_file, tmp_path, **extra):
    base = dict(rl_algorithm="vapo", rollout_n=2, global_batch_size=2, global_mini_batch_size=2,
                per_device_train_batch_size=4, pretrain_critic_steps=1, critic_learning_rate=1e-2)
    return make_ppo(tiny_model_dir, prompts_file, tmp_path, reward=signed_chars, **{**base, **extra})


def test_vapo_advantages_use_the_length_adaptive_actor_lambda_and_critic_lambda_one(tiny_model_dir, prompts_file,
                                                                                     tmp_path):
    s = make_vapo(tiny_model_dir, prompts_file, tmp_path, length_adaptive_alpha=0.5)
    a = s.args
    assert (a.critic_warmup_steps, a.lam_critic, a.positive_lm_coeff) == (1, 1.0, 0.1)
    assert (a.clip_range_ratio_low, a.clip_range_ratio_high, a.loss_agg_mode) == (0.2, 0.28, "token-mean")
    assert s.state.critic is not None
    batch = rollout_with_advantages(s)
    mask = batch.response_mask
    lam = length_adaptive_lambda(mask.sum(-1), 0.5)  # lengths 1..8: 1 - 2/l
    raw, returns = decoupled_gae(batch.token_rewards, batch.values, mask, 1.0, lam, 1.0)
    torch.testing.assert_close(batch.returns, returns)
    torch.testing.assert_close(batch.advantages, masked_whiten(raw, mask))
    # critic lambda 1 with gamma 1: the return on every token is the sequence's total reward
    total = (batch.token_rewards * mask).sum(-1, keepdim=True)
    torch.testing.assert_close(batch.returns, total * mask)
    s.close()


def test_vapo_pretrains_the_critic_then_moves_the_actor_with_the_positive_lm_loss(tiny_model_dir, prompts_file,
                                                                                  tmp_path):
    s = make_vapo(tiny_model_dir, prompts_file, tmp_path)
    actor, critic = snapshot(s.model), snapshot(s.state.critic.model)
    first = s.step()  # value pretraining: only the critic moves
    assert changed(actor, snapshot(s.model)) == [] and changed(critic, snapshot(s.state.critic.model)) != []
    assert "actor/pg_loss" not in first and "critic/value_loss" in first
    second = s.step()
    assert changed(actor, snapshot(s.model)) != []
    assert "actor/positive_lm_loss" in second and second["actor/positive_lm_loss"] >= 0.0
    s.close()


def test_the_positive_lm_loss_changes_the_update(tiny_model_dir, prompts_file, tmp_path):
    after = []
    for coeff in (0.0, 1.0):
        s = make_vapo(tiny_model_dir, prompts_file, tmp_path / str(coeff), pretrain_critic_steps=0,
                      positive_lm_coeff=coeff, max_steps=1)
        batch = rollout_with_advantages(s)
        assert bool((batch.scores > 0).any()), batch.response_texts  # there are positive examples
        metrics = s.update(batch)
        assert ("actor/positive_lm_loss" in metrics) == (coeff > 0)
        after.append(snapshot(s.model))
        s.close()
    assert changed(after[0], after[1]) != []


@pytest.mark.parametrize("alpha", [None, 0.05])
def test_ppo_keys_lam_critic_and_alpha_work_outside_vapo(tiny_model_dir, prompts_file, tmp_path, alpha):
    s = make_ppo(tiny_model_dir, prompts_file, tmp_path, reward=signed_chars, lam=0.9, lam_critic=1.0,
                 length_adaptive_alpha=alpha)
    batch = rollout_with_advantages(s)
    mask = batch.response_mask
    lam = 0.9 if alpha is None else length_adaptive_lambda(mask.sum(-1), alpha)
    _, returns = decoupled_gae(batch.token_rewards, batch.values, mask, 1.0, lam, 1.0)
    torch.testing.assert_close(batch.returns, returns)
    s.close()
