"""Advantage estimators against hand-computed values."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ppokit.algos import ADVANTAGE_ESTIMATORS, compute_advantages
from ppokit.algos.advantages import (
    gae,
    grpo,
    reinforce_pp,
    reinforce_pp_baseline,
    rloo,
    score_to_token_rewards,
)


def _lengths_mask(lengths, t):
    """(B, t) mask with the first lengths[i] positions valid."""
    return (torch.arange(t)[None, :] < torch.tensor(lengths)[:, None]).float()


# Interleaved, non-contiguous groups:
#   group 0: scores 1, 2, 3   -> mu 2, unbiased std sqrt((1 + 0 + 1)/2) = 1
#   group 5: scores 5, 5      -> all equal -> 0
#   group 9: score 7          -> group of one -> 0
#   group 7: scores 0, 1, 1, 0 -> mu 0.5, unbiased std sqrt(4 * 0.25 / 3) = sqrt(1/3)
SCORES = torch.tensor([1.0, 5.0, 2.0, 7.0, 0.0, 5.0, 3.0, 1.0, 1.0, 0.0])
GROUPS = torch.tensor([0, 5, 0, 9, 7, 5, 0, 7, 7, 7])
MASK = _lengths_mask([3, 1, 2, 3, 3, 2, 1, 3, 2, 1], 3)


def test_grpo_worked_example():
    adv, ret = grpo(SCORES, GROUPS, MASK)
    s7 = 0.5 / (math.sqrt(1 / 3) + 1e-6)  # 0.5 / 0.57735 = 0.866025
    per_seq = torch.tensor([-1 / (1 + 1e-6), 0.0, 0.0, 0.0, -s7, 0.0, 1 / (1 + 1e-6), s7, s7, -s7])
    expected = per_seq[:, None] * MASK
    torch.testing.assert_close(adv, expected)
    torch.testing.assert_close(ret, expected)
    assert (adv[MASK == 0] == 0).all()


def test_drgrpo_worked_example():
    adv, _ = grpo(SCORES, GROUPS, MASK, norm_by_std=False)
    # s - mu only: group 0 -> -1, 0, 1 ; group 7 -> -0.5, 0.5, 0.5, -0.5 ; others 0
    per_seq = torch.tensor([-1.0, 0.0, 0.0, 0.0, -0.5, 0.0, 1.0, 0.5, 0.5, -0.5])
    torch.testing.assert_close(adv, per_seq[:, None] * MASK)


def test_grpo_all_equal_non_representable_scores_give_exact_zero():
    # 0.1 is not exact in binary: the mean can differ from 0.1 by one ulp, and dividing that
    # by (0 + 1e-6) would give a spurious ~0.01 advantage. All-equal groups must give 0.
    scores = torch.tensor([0.1, 0.1, 0.1, 0.7, 0.7])
    adv, _ = grpo(scores, torch.tensor([0, 0, 0, 1, 1]), torch.ones(5, 2))
    assert (adv == 0).all() and not adv.isnan().any()


def test_grpo_group_of_one_is_zero():
    adv, _ = grpo(torch.tensor([3.0]), torch.tensor([4]), torch.ones(1, 2))
    assert (adv == 0).all()


def test_grpo_rejects_nan_scores():
    with pytest.raises(ValueError, match="NaN"):
        grpo(torch.tensor([1.0, float("nan")]), torch.tensor([0, 0]), torch.ones(2, 1))


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 4), st.integers(-3, 3)), min_size=1, max_size=12),
    st.randoms(use_true_random=False),
)
def test_grpo_and_rloo_shuffled_groups_equal_sorted(rows, rnd):
    ids = torch.tensor([g for g, _ in rows])
    scores = torch.tensor([float(s) for _, s in rows])
    mask = torch.ones(len(rows), 2)
    perm = list(range(len(rows)))
    rnd.shuffle(perm)
    perm = torch.tensor(perm)
    for fn in (grpo, rloo):
        adv, _ = fn(scores, ids, mask)
        adv_p, _ = fn(scores[perm], ids[perm], mask)
        torch.testing.assert_close(adv_p, adv[perm])


def test_rloo_worked_example():
    scores = torch.tensor([1.0, 3.0, 2.0, 9.0, 6.0, 5.0])
    ids = torch.tensor([0, 1, 0, 2, 0, 1])
    mask = _lengths_mask([2, 2, 1, 2, 2, 1], 2)
    adv, ret = rloo(scores, ids, mask)
    # group 0 = 1, 2, 6: 1 - (2+6)/2 = -3 ; 2 - (1+6)/2 = -1.5 ; 6 - (1+2)/2 = 4.5
    # group 1 = 3, 5: 3 - 5 = -2 ; 5 - 3 = 2 ; group 2 = 9 alone -> 0
    per_seq = torch.tensor([-3.0, -2.0, -1.5, 0.0, 4.5, 2.0])
    torch.testing.assert_close(adv, per_seq[:, None] * mask)
    torch.testing.assert_close(ret, adv)


def test_reinforce_pp_worked_example():
    r = torch.tensor([[0.0, 0.0, 1.0], [0.0, 2.0, 9.0]])
    m = torch.tensor([[1, 1, 1], [1, 1, 0]])
    adv, ret = reinforce_pp(r, m, gamma=0.5)
    # row 0: G2 = 1, G1 = 0 + 0.5*1 = 0.5, G0 = 0.25
    # row 1: t=2 masked (its 9 is dropped: R reset to 0 after it), G1 = 2, G0 = 0 + 0.5*2 = 1
    torch.testing.assert_close(ret, torch.tensor([[0.25, 0.5, 1.0], [1.0, 2.0, 0.0]]))
    # whiten over 0.25, 0.5, 1, 1, 2: mean 4.75/5 = 0.95; deviations -0.7, -0.45, 0.05, 0.05, 1.05
    # squares 0.49 + 0.2025 + 0.0025 + 0.0025 + 1.1025 = 1.8; unbiased var 1.8/4 = 0.45
    std = math.sqrt(0.45)  # 0.670820
    expected = torch.tensor([[-0.7, -0.45, 0.05], [0.05, 1.05, 0.0]]) / std
    torch.testing.assert_close(adv, expected, atol=1e-6, rtol=1e-5)


def test_reinforce_pp_return_carries_across_masked_tokens():
    r = torch.tensor([[1.0, 5.0, 1.0]])  # the 5 sits on a masked (tool-result) token: ignored
    m = torch.tensor([[1, 0, 1]])
    _, ret = reinforce_pp(r, m, gamma=0.5)
    # t2: R = 1 -> G2 = 1 ; t1 masked: skipped, R stays 1, G1 reported 0 ; t0: R = 1 + 0.5 * 1 = 1.5
    torch.testing.assert_close(ret, torch.tensor([[1.5, 0.0, 1.0]]))
    # the same as the row with the masked token removed
    _, short = reinforce_pp(torch.tensor([[1.0, 1.0]]), torch.ones(1, 2), gamma=0.5)
    torch.testing.assert_close(ret[:, [0, 2]], short)


def test_score_sits_on_the_last_model_token_of_a_multi_turn_row():
    # model tokens 0-1, tool result 2-3, model tokens 4, padding 5; second row: single turn of 2 tokens
    mask = torch.tensor([[1.0, 1.0, 0.0, 0.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0, 0.0, 0.0]])
    tr = score_to_token_rewards(torch.tensor([2.0, -1.0]), mask)
    torch.testing.assert_close(tr, torch.tensor([[0.0, 0, 0, 0, 2, 0], [0, -1, 0, 0, 0, 0]]))
    # REINFORCE++ with gamma 1: every model token of row 0 gets the score (before whitening), tool tokens 0
    _, ret = reinforce_pp(tr, mask, gamma=1.0)
    torch.testing.assert_close(ret, torch.tensor([[2.0, 2, 0, 0, 2, 0], [-1, -1, 0, 0, 0, 0]]))
    # GAE with V = 0.5 everywhere, gamma = lam = 1: A_t = score - V_t over model tokens, tool tokens skipped
    adv, g_ret = gae(tr, torch.full_like(tr, 0.5), mask, 1.0, 1.0, whiten=False)
    torch.testing.assert_close(adv, torch.tensor([[1.5, 1.5, 0, 0, 1.5, 0], [-1.5, -1.5, 0, 0, 0, 0]]))
    torch.testing.assert_close(g_ret, ret)


def test_reinforce_pp_baseline_worked_example():
    r = torch.tensor([[0.0, 0.0, 1.0], [0.0, 3.0, 4.0], [0.0, 0.0, 5.0]])
    m = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 1, 1]])
    ids = torch.tensor([0, 0, 1])
    adv, ret = reinforce_pp_baseline(r, ids, m, gamma=1.0)
    # scores (valid tokens only): 1, 3, 5 ; group means: group 0 = 2, group 1 (alone) = 5
    # shaped rewards: row0 [0, 0, 1-2] ; row1 [0, 3-2, -] ; row2 [0, 0, 5-5]
    # gamma 1 returns: row0 [-1, -1, -1] ; row1 [1, 1, 0] ; row2 [0, 0, 0]
    torch.testing.assert_close(ret, torch.tensor([[-1.0, -1.0, -1.0], [1.0, 1.0, 0.0], [0.0, 0.0, 0.0]]))
    # whiten over 8 valid tokens: sum -1 -> mean -0.125 ; deviations -0.875 (x3), 1.125 (x2), 0.125 (x3)
    # squares 3*0.765625 + 2*1.265625 + 3*0.015625 = 4.875 ; unbiased var 4.875/7
    std = math.sqrt(4.875 / 7)  # 0.834523
    expected = torch.tensor([[-0.875, -0.875, -0.875], [1.125, 1.125, 0.0], [0.125, 0.125, 0.125]]) / std
    torch.testing.assert_close(adv, expected, atol=1e-6, rtol=1e-5)


def test_reinforce_pp_baseline_keeps_per_token_rewards_in_place():
    # per-token KL-like reward -0.5 at t0 and score 2 at t2: score = 1.5; two-row group mean = (1.5 + 0.5)/2 = 1
    r = torch.tensor([[-0.5, 0.0, 2.0], [0.0, 0.0, 0.5]])
    _, ret = reinforce_pp_baseline(r, torch.tensor([3, 3]), torch.ones(2, 3), gamma=0.5)
    # row0 shaped [-0.5, 0, 2-1=1]: G2 = 1, G1 = 0.5, G0 = -0.5 + 0.25 = -0.25
    # row1 shaped [0, 0, 0.5-1=-0.5]: G2 = -0.5, G1 = -0.25, G0 = -0.125
    torch.testing.assert_close(ret, torch.tensor([[-0.25, 0.5, 1.0], [-0.125, -0.25, -0.5]]))


def test_gae_worked_example():
    r = torch.tensor([[0.0, 0.0, 1.0]])
    v = torch.tensor([[0.5, 0.2, 0.4]])
    adv, ret = gae(r, v, torch.ones(1, 3), gamma=0.9, lam=0.8)
    # t2: delta = 1 + 0.9*0 - 0.4 = 0.6 ; A2 = 0.6
    # t1: delta = 0 + 0.9*0.4 - 0.2 = 0.16 ; A1 = 0.16 + 0.72*0.6 = 0.592
    # t0: delta = 0 + 0.9*0.2 - 0.5 = -0.32 ; A0 = -0.32 + 0.72*0.592 = 0.10624
    # returns = A + V = 0.60624, 0.792, 1.0
    torch.testing.assert_close(ret, torch.tensor([[0.60624, 0.792, 1.0]]))
    a = [0.10624, 0.592, 0.6]
    mean = sum(a) / 3  # 0.4327467
    std = math.sqrt(sum((x - mean) ** 2 for x in a) / 2)
    torch.testing.assert_close(adv, torch.tensor([[(x - mean) / std for x in a]]), atol=1e-5, rtol=1e-5)


def test_gae_masked_middle_equals_removed():
    # masked position 1 holds garbage reward/value: it must be skipped entirely
    r_gap = torch.tensor([[0.1, 100.0, -0.2, 0.0, 1.0, 0.0]])
    v_gap = torch.tensor([[0.3, -50.0, 0.1, 0.2, 0.4, 9.0]])
    m_gap = torch.tensor([[1, 0, 1, 0, 1, 0]])
    r_cut = torch.tensor([[0.1, -0.2, 1.0]])
    v_cut = torch.tensor([[0.3, 0.1, 0.4]])
    adv_g, ret_g = gae(r_gap, v_gap, m_gap, gamma=0.9, lam=0.8)
    adv_c, ret_c = gae(r_cut, v_cut, torch.ones(1, 3), gamma=0.9, lam=0.8)
    keep = m_gap[0].bool()
    torch.testing.assert_close(adv_g[:, keep], adv_c)
    torch.testing.assert_close(ret_g[:, keep], ret_c)
    assert (adv_g[:, ~keep] == 0).all() and (ret_g[:, ~keep] == 0).all()
    # by hand (cut sequence): t2 delta = 1 - 0.4 = 0.6 ; t1 delta = -0.2 + 0.9*0.4 - 0.1 = 0.06,
    # A1 = 0.06 + 0.72*0.6 = 0.492 ; t0 delta = 0.1 + 0.9*0.1 - 0.3 = -0.11, A0 = -0.11 + 0.72*0.492 = 0.24424
    torch.testing.assert_close(ret_c, torch.tensor([[0.24424 + 0.3, 0.492 + 0.1, 0.6 + 0.4]]))


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.floats(-2, 2), st.floats(-2, 2)), min_size=2, max_size=10))
def test_gae_gap_invariance_random(cells):
    mask = torch.tensor([[1.0 if keep else 0.0 for keep, _, _ in cells]])
    if mask.sum() < 2:
        mask[0, :2] = 1.0
    r = torch.tensor([[x for _, x, _ in cells]], dtype=torch.float64)
    v = torch.tensor([[y for _, _, y in cells]], dtype=torch.float64)
    keep = mask[0].bool()
    adv_g, ret_g = gae(r, v, mask, gamma=0.95, lam=0.9)
    adv_c, ret_c = gae(r[:, keep], v[:, keep], torch.ones(1, int(keep.sum())), gamma=0.95, lam=0.9)
    torch.testing.assert_close(ret_g[:, keep], ret_c)
    torch.testing.assert_close(adv_g[:, keep], adv_c)


def test_registry_entries_match_the_functions():
    r = torch.zeros(4, 2)
    r[:, 1] = torch.tensor([1.0, 0.0, 3.0, 2.0])  # outcome score on the last token
    mask = torch.ones(4, 2)
    ids = torch.tensor([0, 0, 1, 1])
    assert set(ADVANTAGE_ESTIMATORS) == {
        "grpo", "drgrpo", "rloo", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "gae", "vapo",
    }
    adv, _ = compute_advantages("drgrpo", r, mask, group_ids=ids)
    # scores 1, 0 | 3, 2 -> means 0.5 | 2.5 -> +-0.5
    torch.testing.assert_close(adv, torch.tensor([0.5, -0.5, 0.5, -0.5])[:, None].expand(4, 2))
    adv_std, _ = compute_advantages("grpo", r, mask, group_ids=ids)
    # std of a pair differing by 1: sqrt(2 * 0.25 / 1) = 0.70711 -> 0.5/0.70711 = 0.70711
    torch.testing.assert_close(adv_std[:, 0], torch.tensor([1.0, -1.0, 1.0, -1.0]) * 0.5 / (math.sqrt(0.5) + 1e-6))
    adv_rloo, _ = compute_advantages("rloo", r, mask, group_ids=ids)
    torch.testing.assert_close(adv_rloo[:, 0], torch.tensor([1.0, -1.0, 1.0, -1.0]))
    with pytest.raises(ValueError, match="group_ids"):
        compute_advantages("grpo", r, mask)
    with pytest.raises(ValueError, match="values"):
        compute_advantages("gae", r, mask)
    with pytest.raises(ValueError, match="unknown"):
        compute_advantages("ppo2", r, mask)
    adv_g, _ = compute_advantages("gae", r, mask, values=torch.zeros(4, 2), gamma=1.0, lam=1.0)
    adv_rpp, _ = compute_advantages("reinforce_plus_plus", r, mask, gamma=1.0)
    # with V = 0, gamma = lam = 1, GAE's A is the return: same as REINFORCE++ after whitening
    torch.testing.assert_close(adv_g, adv_rpp)


def test_adding_an_estimator_is_one_decorated_function():
    from ppokit.algos.advantages import ADVANTAGE_ESTIMATORS as table
    from ppokit.algos.advantages import estimator

    @estimator("test_constant")
    def constant(mask, gamma):  # reads only what it names
        return mask * gamma, mask
    try:
        adv, _ = compute_advantages("test_constant", torch.zeros(2, 3), torch.ones(2, 3), gamma=2.0, values=None)
        torch.testing.assert_close(adv, torch.full((2, 3), 2.0))
        with pytest.raises(ValueError, match="needs gamma"):
            compute_advantages("test_constant", torch.zeros(2, 3), torch.ones(2, 3))
        with pytest.raises(ValueError, match="registered twice"):
            estimator("test_constant")(constant)
    finally:
        table.pop("test_constant")
