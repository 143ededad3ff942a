"""Truncated importance sampling and the rollout–train log-prob mismatch, against hand-computed values."""

import math

import pytest
import torch

from ppokit.algos import logprob_mismatch, truncated_is_weights

LN2, LN4 = math.log(2.0), math.log(4.0)
MASK = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0]])


def test_weights_are_one_when_the_engines_agree():
    logp = torch.tensor([[-0.5, -1.2, -2.0, -9.0], [-0.1, -3.0, 0.0, 0.0]])
    for level in ("token", "sequence"):
        w, m = truncated_is_weights(logp, logp.clone(), MASK, level, cap=2.0)
        torch.testing.assert_close(w, MASK)  # 1 on valid tokens, 0 on padding
        assert float(m["is_weight_mean"]) == 1.0 and float(m["is_clipfrac"]) == 0.0
    diff = logprob_mismatch(logp, logp.clone(), MASK)
    assert float(diff["logprob_diff"]) == 0.0 and float(diff["logprob_diff_max"]) == 0.0


def test_token_level_clips_a_planted_mismatch_at_the_cap():
    old = torch.zeros(2, 4)
    # log(old/rollout) per token: row 0 = ln2, ln4 (ratio 4 > cap 2), -ln2 ; row 1 = 0, ln2 ; masked: 50, -50
    rollout = torch.tensor([[-LN2, -LN4, LN2, -50.0], [0.0, -LN2, 50.0, 50.0]])
    w, m = truncated_is_weights(old, rollout, MASK, "token", cap=2.0)
    expected = torch.tensor([[2.0, 2.0, 0.5, 0.0], [1.0, 2.0, 0.0, 0.0]])
    torch.testing.assert_close(w, expected)
    # valid weights 2, 2, 0.5, 1, 2 -> mean 7.5 / 5 = 1.5; only the ratio-4 token exceeds the cap
    assert math.isclose(float(m["is_weight_mean"]), 1.5, rel_tol=1e-6)
    assert math.isclose(float(m["is_clipfrac"]), 1 / 5, rel_tol=1e-6)
    diff = logprob_mismatch(old, rollout, MASK)
    # |delta| = ln2, ln4, ln2, 0, ln2 -> mean (3 ln2 + ln4)/5 = 5 ln2 / 5 = ln2 ; max ln4 (masked 50s ignored)
    assert math.isclose(float(diff["logprob_diff"]), LN2, rel_tol=1e-6)
    assert math.isclose(float(diff["logprob_diff_max"]), LN4, rel_tol=1e-6)


def test_sequence_level_uses_the_product_of_token_ratios():
    old = torch.zeros(2, 4)
    # row 0: ratios 2 * 1 * 0.5 = 1 -> w 1 ; row 1: ratios 2 * 4 = 8 -> capped at 3
    rollout = torch.tensor([[-LN2, 0.0, LN2, -50.0], [-LN2, -LN4, 50.0, 50.0]])
    w, m = truncated_is_weights(old, rollout, MASK, "sequence", cap=3.0)
    torch.testing.assert_close(w, torch.tensor([[1.0, 1.0, 1.0, 0.0], [3.0, 3.0, 0.0, 0.0]]))
    assert math.isclose(float(m["is_weight_mean"]), (3 * 1.0 + 2 * 3.0) / 5, rel_tol=1e-6)
    assert math.isclose(float(m["is_clipfrac"]), 2 / 5, rel_tol=1e-6)


def test_off_is_one_and_weights_carry_no_gradient():
    old = torch.zeros(2, 4, requires_grad=True)
    rollout = torch.full((2, 4), -1.0)
    w, _ = truncated_is_weights(old, rollout, MASK, "off", cap=2.0)
    torch.testing.assert_close(w, MASK)
    w, _ = truncated_is_weights(old, rollout, MASK, "token", cap=10.0)
    assert not w.requires_grad
    torch.testing.assert_close(w, MASK * math.e)


@pytest.mark.parametrize("level, cap, message", [("tok", 2.0, "rollout_is must be one of"),
                                                  ("token", 0.0, "rollout_is_cap must be > 0")])
def test_bad_settings_are_explained(level, cap, message):
    with pytest.raises(ValueError, match=message):
        truncated_is_weights(torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(1, 2), level, cap)
