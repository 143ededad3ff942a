"""Algorithm variants through the Session: presets, DAPO dynamic sampling, overlong shaping, RLOO, RF++."""

import pytest
import torch
from session_helpers import distinct_chars, tiny_overrides

from ppokit.args import load_arguments
from ppokit.errors import PpokitError
from ppokit.session import Session


def flat_for_even_prompts(prompts, responses, **fields):
    """Constant reward for prompts ending in an even digit (no signal), distinct chars otherwise."""
    out = []
    for p, r in zip(prompts, responses):
        digit = int(p.rstrip(":").split()[-1])
        out.append(1.0 if digit % 2 == 0 else float(len(set(r))))
    return out


def make(tiny_model_path, prompts_file, tmp_path, reward=distinct_chars, **extra):
    args = load_arguments(None, overrides=tiny_overrides(tiny_model_path, prompts_file, tmp_path, **extra))
    return Session(args, reward_functions=[reward])


def test_presets_apply_only_to_unset_keys():
    a = load_arguments(None, overrides=dict(rl_algorithm="drgrpo", global_batch_size=2, rollout_n=2))
    assert a.loss_agg_mode == "seq-mean-token-sum-norm" and a.norm_adv_by_std_in_grpo is False
    b = load_arguments(None, overrides=dict(rl_algorithm="dapo", global_batch_size=2, rollout_n=2,
                                            clip_range_ratio_high=0.3))
    assert b.clip_range_ratio_high == 0.3 and b.clip_range_ratio_low == 0.2 and b.dynamic_sampling


def test_dapo_dynamic_sampling_keeps_only_informative_groups(tiny_model_path, prompts_file, tmp_path):
    s = make(tiny_model_path, prompts_file, tmp_path, reward=flat_for_even_prompts, rl_algorithm="dapo",
             enable_overlong_reward_buffer=False)
    batch = s.produce()  # rollout, score, dynamic sampling
    groups = torch.unique(batch.group_ids)
    assert len(groups) == 4 and len(batch) == 16  # the step's 4 prompt groups are full
    assert batch.stats["groups/dropped_zero_std"] > 0  # even-numbered prompts were drawn and dropped
    for g in groups:
        assert batch.scores[batch.group_ids == g].std() > 0
    metrics = s.update(batch)
    assert "actor/pg_loss" in metrics


def test_dapo_gives_up_after_max_gen_batches(tiny_model_path, prompts_file, tmp_path):
    s = make(tiny_model_path, prompts_file, tmp_path, reward=lambda p, r, **k: [1.0] * len(r),
             rl_algorithm="dapo", max_gen_batches=2)
    with pytest.raises(PpokitError, match="max_gen_batches"):
        s.produce()


def test_overlong_shaping_adds_a_penalty_term(tiny_model_path, prompts_file, tmp_path):
    s = make(tiny_model_path, prompts_file, tmp_path, enable_overlong_reward_buffer=True,
             overlong_reward_buffer=4, overlong_penalty_factor=1.0)
    batch = s.rollout()
    s.score(batch)
    batch = s.latest(batch)
    lengths = batch.response_lengths
    expected = -((lengths - 4).clamp_min(0) / 4).clamp_max(1.0)  # max_dec_len 8, buffer 4
    torch.testing.assert_close(batch.reward_terms["overlong"], expected)


@pytest.mark.parametrize("algo", ["rloo", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "drgrpo"])
def test_other_estimators_run_a_step(tiny_model_path, prompts_file, tmp_path, algo):
    s = make(tiny_model_path, prompts_file, tmp_path, rl_algorithm=algo, kl_coeff=0.0)
    metrics = s.step()
    assert torch.isfinite(torch.tensor(metrics["actor/pg_loss"]))
    assert s.last_batch.advantages.shape == s.last_batch.response_mask.shape
