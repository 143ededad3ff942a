"""PPO advantages through the Session: GAE on known critic values, KL in the reward, whitening."""

import math

import pytest
import torch
from ppo_helpers import make_ppo

LENGTHS = [3, 8, 5, 1]  # response lengths forced onto the 4 rollouts (as if EOS came early)


def by_position(prompts, responses, **fields):
    """Scores 0, 0.25, 0.5, 0.75: known per row."""
    return [0.25 * i for i in range(len(responses))]


def shorten(batch, lengths):
    """Cut each response to `lengths[i]` tokens: masks, attention and ids past it become padding."""
    P = batch.prompt_len
    for i, n in enumerate(lengths):
        batch.response_mask[i, n:] = 0.0
        batch.loss_mask[i, n:] = 0.0
        batch.attention_mask[i, P + n :] = 0
        batch.input_ids[i, P + n :] = 0


def rollout_with_fixed_values(session, value=0.5):
    session.state.critic.values = lambda batch: torch.full_like(batch.response_mask, value) * batch.response_mask
    batch = session.rollout()
    assert batch.response_mask.shape[1] == 8, "the tiny model should not stop before max_dec_len here"
    shorten(batch, LENGTHS)
    batch, _ = session.walk(batch, "with_logprobs")  # score, then log-probs and values on the shortened rows
    return batch


def expected(lengths, scores, value, gamma, lam):
    """Closed forms for r = score on the last token, V = value everywhere (hand-derived):
    gamma = 1:  A_t = lam^(L-1-t) (s - V);     lam = 1:  A_t = gamma^(L-1-t) s - V."""
    adv = torch.zeros(len(lengths), 8)
    for i, (L, s) in enumerate(zip(lengths, scores)):
        for t in range(L):
            k = L - 1 - t
            adv[i, t] = lam**k * (s - value) if gamma == 1 else gamma**k * s - value
    mask = torch.zeros(len(lengths), 8)
    for i, L in enumerate(lengths):
        mask[i, :L] = 1
    return adv, (adv + value) * mask, mask


@pytest.mark.parametrize("gamma,lam", [(1.0, 0.95), (0.5, 1.0)])
def test_gae_on_known_values(tiny_model_dir, prompts_file, tmp_path, gamma, lam):
    s = make_ppo(tiny_model_dir, prompts_file, tmp_path, reward=by_position, gamma=gamma, lam=lam,
                 normalize_advantage=False)
    batch = rollout_with_fixed_values(s)
    s.compute_advantages(batch)
    batch = s.latest(batch)
    adv, returns, mask = expected(LENGTHS, [0.0, 0.25, 0.5, 0.75], 0.5, gamma, lam)
    torch.testing.assert_close(batch.advantages, adv, atol=1e-6, rtol=0)
    torch.testing.assert_close(batch.returns, returns, atol=1e-6, rtol=0)
    # e.g. row 0 (L=3, s=0) with gamma=1, lam=0.95: A = -0.5 * (0.9025, 0.95, 1)
    if gamma == 1.0:
        assert batch.advantages[0, :3].tolist() == pytest.approx([-0.45125, -0.475, -0.5])
    # the returns are what the critic is trained on: an update runs on them and moves the critic
    metrics = s.update(batch)
    assert metrics["critic/values_mean"] == pytest.approx(0.5)
    assert metrics["critic/returns_mean"] == pytest.approx(float(returns.sum() / mask.sum()), abs=1e-6)


def test_advantages_are_whitened_unless_normalize_advantage_is_false(tiny_model_dir, prompts_file, tmp_path):
    s = make_ppo(tiny_model_dir, prompts_file, tmp_path, reward=by_position)  # normalize_advantage unset
    assert s.args.normalize_advantage is None
    batch = rollout_with_fixed_values(s)
    s.compute_advantages(batch)
    batch = s.latest(batch)
    raw, returns, mask = expected(LENGTHS, [0.0, 0.25, 0.5, 0.75], 0.5, 1.0, 0.95)
    valid = raw[mask.bool()]
    white = (raw - valid.mean()) / valid.std() * mask  # unbiased std over the 17 valid tokens
    torch.testing.assert_close(batch.advantages, white, atol=1e-5, rtol=0)
    torch.testing.assert_close(batch.returns, returns, atol=1e-6, rtol=0)  # returns are never whitened


@pytest.mark.parametrize("estimator,per_token", [("k3", math.exp(-0.1) + 0.1 - 1), ("k1", 0.1)])
def test_kl_penalty_on_every_token_and_score_on_the_last(tiny_model_dir, prompts_file, tmp_path, estimator, per_token):
    s = make_ppo(tiny_model_dir, prompts_file, tmp_path, reward=by_position, kl_coeff=0.1, kl_penalty=estimator,
                 normalize_advantage=False)
    batch = rollout_with_fixed_values(s)
    assert batch.ref_logprobs is not None and batch.old_logprobs is not None
    batch.ref_logprobs = batch.old_logprobs - 0.1  # log pi_old - log pi_ref = 0.1 on every token
    s.compute_advantages(batch)
    batch = s.latest(batch)
    want = torch.zeros(4, 8)
    for i, L in enumerate(LENGTHS):
        want[i, :L] = -0.1 * per_token
        want[i, L - 1] += 0.25 * i
    torch.testing.assert_close(batch.token_rewards, want, atol=1e-6, rtol=0)
    assert batch.stats["kl/beta"] == pytest.approx(0.1)
    assert batch.stats["kl/reward_kl"] == pytest.approx(per_token, rel=1e-5)
    assert batch.stats["kl/seq_kl_mean"] == pytest.approx(per_token * sum(LENGTHS) / 4, rel=1e-5)
    # GAE then runs on these token rewards: row 3 has one token, so A = r - V
    assert float(batch.advantages[3, 0]) == pytest.approx(0.75 - 0.1 * per_token - 0.5, abs=1e-6)


def test_kl_is_zero_at_the_first_rollout(tiny_model_dir, prompts_file, tmp_path):
    s = make_ppo(tiny_model_dir, prompts_file, tmp_path, reward=by_position, kl_coeff=0.05)
    batch = s.rollout()
    s.compute_advantages(batch)
    batch = s.latest(batch)
    assert batch.stats["kl/reward_kl"] == pytest.approx(0.0, abs=1e-6)
    assert batch.stats["kl/beta"] == pytest.approx(0.05)
