"""VAPO's math (length-adaptive lambda, decoupled GAE, positive-example NLL) against hand-computed values."""

import pytest
import torch

from ppokit.algos import ALGORITHMS, AUX_LOSSES, compute_advantages, reduce_loss
from ppokit.algos.advantages import decoupled_gae, gae, length_adaptive_lambda
from ppokit.algos.lm_loss import positive_example_nll
from ppokit.algos.masked import masked_whiten


def test_length_adaptive_lambda_is_one_minus_one_over_alpha_l():
    # alpha = 0.05: 1 - 20 / l -> l=10: -1 -> 0 (clamped); 20: 0; 40: 0.5; 100: 0.8; 400: 0.95
    lam = length_adaptive_lambda(torch.tensor([10, 20, 40, 100, 400]), 0.05)
    torch.testing.assert_close(lam, torch.tensor([0.0, 0.0, 0.5, 0.8, 0.95]))
    with pytest.raises(ValueError, match="alpha"):
        length_adaptive_lambda(torch.tensor([5]), 0.0)


# Row 0: rewards [0, 0, 1], values [0.5, 0.2, 0.4], all valid. gamma = 1.
#   deltas: d2 = 1 - 0.4 = 0.6, d1 = 0.4 - 0.2 = 0.2, d0 = 0.2 - 0.5 = -0.3
#   lam 1:   A = [0.5, 0.8, 0.6] -> returns A + V = [1, 1, 1] (the Monte-Carlo return)
#   lam 0.5: A2 = 0.6, A1 = 0.2 + 0.5 * 0.6 = 0.5, A0 = -0.3 + 0.5 * 0.5 = -0.05
# Row 1: rewards [0, 2, (9)], values [1, 0.5, (9)], mask [1, 1, 0] (the last column is padding).
#   deltas: d1 = 2 - 0.5 = 1.5, d0 = 0.5 - 1 = -0.5
#   lam 1:    A = [1.0, 1.5] -> returns [2, 2, 0]
#   lam 0:    A = [-0.5, 1.5]
#   lam 0.25: A0 = -0.5 + 0.25 * 1.5 = -0.125
R = torch.tensor([[0.0, 0.0, 1.0], [0.0, 2.0, 9.0]])
V = torch.tensor([[0.5, 0.2, 0.4], [1.0, 0.5, 9.0]])
M = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])


def test_gae_takes_one_lambda_per_sequence():
    per_row, _ = gae(R, V, M, 1.0, torch.tensor([0.7, 0.7]))
    scalar, _ = gae(R, V, M, 1.0, 0.7)
    torch.testing.assert_close(per_row, scalar)


def test_decoupled_gae_uses_the_actor_lambda_for_advantages_and_the_critic_lambda_for_returns():
    adv, ret = decoupled_gae(R, V, M, 1.0, torch.tensor([0.5, 0.0]), 1.0)
    torch.testing.assert_close(adv, torch.tensor([[-0.05, 0.5, 0.6], [-0.5, 1.5, 0.0]]))
    torch.testing.assert_close(ret, torch.tensor([[1.0, 1.0, 1.0], [2.0, 2.0, 0.0]]))
    # with equal lambdas it is plain GAE (advantages before whitening)
    adv_same, ret_same = decoupled_gae(R, V, M, 1.0, 0.95, 0.95)
    _, ret_gae = gae(R, V, M, 1.0, 0.95)
    torch.testing.assert_close(ret_same, ret_gae)
    torch.testing.assert_close(adv_same, (ret_gae - V) * M)


def test_vapo_registry_entry_whitens_length_adaptive_advantages():
    assert ALGORITHMS["vapo"].estimator == "vapo" and ALGORITHMS["vapo"].needs_critic
    assert ALGORITHMS["vapo"].kl_in_reward  # PPO's KL in the reward (kl_coeff), as ppo
    # lengths 3 and 2; alpha = 2/3: lam = 1 - 1/(2/3 * 3) = 0.5 and 1 - 1/(2/3 * 2) = 0.25
    adv, ret = compute_advantages("vapo", R, M, values=V, gamma=1.0, lam_critic=1.0, length_alpha=2 / 3)
    raw = torch.tensor([[-0.05, 0.5, 0.6], [-0.125, 1.5, 0.0]])
    torch.testing.assert_close(adv, masked_whiten(raw, M))
    torch.testing.assert_close(ret, torch.tensor([[1.0, 1.0, 1.0], [2.0, 2.0, 0.0]]))
    with pytest.raises(ValueError, match="values"):
        compute_advantages("vapo", R, M)
    # the vapo entry defaults to the paper's values (critic lambda 1, alpha 0.05); the gae entry takes the same keys
    paper, _ = compute_advantages("vapo", R, M, values=V)
    torch.testing.assert_close(paper, compute_advantages("vapo", R, M, values=V, lam_critic=1.0, length_alpha=0.05)[0])
    torch.testing.assert_close(paper, compute_advantages("gae", R, M, values=V, lam_critic=1.0, length_alpha=0.05)[0])
    plain, _ = compute_advantages("gae", R, M, values=V, lam=0.95)  # without them: plain GAE
    torch.testing.assert_close(plain, gae(R, V, M, 1.0, 0.95)[0])


def test_positive_example_nll_counts_only_positive_responses():
    logp = torch.tensor([[-1.0, -2.0], [-0.5, -3.0], [-4.0, -4.0]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0], [1.0, 1.0]])
    scores = torch.tensor([1.0, 3.0, 0.0])  # row 2 scores 0: not positive
    loss, positive = AUX_LOSSES["positive_nll"](logp, mask, scores)
    torch.testing.assert_close(loss.detach(), torch.tensor([[1.0, 2.0], [0.5, 0.0], [0.0, 0.0]]))
    torch.testing.assert_close(positive, torch.tensor([[1.0, 1.0], [1.0, 0.0], [0.0, 0.0]]))
    # token mean over the 3 positive tokens: (1 + 2 + 0.5) / 3; gradient -1/3 on each of them
    value = reduce_loss(loss, positive, "token-mean")
    torch.testing.assert_close(value, torch.tensor(3.5 / 3))
    value.backward()
    torch.testing.assert_close(logp.grad, torch.tensor([[-1.0, -1.0], [-1.0, 0.0], [0.0, 0.0]]) / 3)
    # a whole-mini-batch denominator (e.g. 7 positive tokens over all micro-batches and ranks) is used as given
    torch.testing.assert_close(reduce_loss(loss, positive, "token-mean", global_tokens=7), torch.tensor(3.5 / 7))
    assert positive_example_nll(logp, mask, scores, threshold=2.0)[1].sum() == 1.0  # only the score-3 row
