"""Adaptive beta through the update path; the reward model, score clipping and reward normalisation."""

import math

import pytest
import torch
from ppo_helpers import distinct_chars, make_ppo

from ppokit.args import load_arguments
from ppokit.rewards.model_reward import ModelReward

K3_01 = math.exp(-0.1) + 0.1 - 1  # k3 at log pi_old - log pi_ref = 0.1


@pytest.mark.parametrize("target_kl,error", [(1e-3, 0.2), (1.0, -0.2), (8 * K3_01 / 1.1, 0.1)])
def test_adaptive_beta_follows_the_response_kl(tiny_model_dir, prompts_file, tmp_path, target_kl, error):
    # beta <- beta (1 + clip(KL / target - 1, -0.2, 0.2) n / horizon) with KL the mean per-response KL
    s = make_ppo(tiny_model_dir, prompts_file, tmp_path, reward=distinct_chars, kl_coeff=0.1,
                 kl_ctrl_type="adaptive", target_kl=target_kl, kl_horizon=10, critic_warmup_steps=100)
    batch, _ = s.walk(s.rollout(), "with_logprobs")
    assert int(batch.response_mask.sum()) == 4 * 8  # four responses of 8 tokens
    batch.ref_logprobs = batch.old_logprobs - 0.1
    s.compute_advantages(batch)
    batch = s.latest(batch)
    assert batch.stats["kl/seq_kl_mean"] == pytest.approx(8 * K3_01, rel=1e-5)
    s.update(batch)
    assert s.state.kl_ctl.value == pytest.approx(0.1 * (1 + error * 4 / 10), rel=1e-5)
    if error > 0:
        assert s.state.kl_ctl.value > 0.1
    else:
        assert s.state.kl_ctl.value < 0.1
    metrics = s.step()  # the next step's rewards use (and log) the new beta
    assert metrics["kl/beta"] == pytest.approx(0.1 * (1 + error * 4 / 10), rel=1e-5)


def test_fixed_beta_does_not_move(tiny_model_dir, prompts_file, tmp_path):
    s = make_ppo(tiny_model_dir, prompts_file, tmp_path, reward=distinct_chars, kl_coeff=0.1, critic_warmup_steps=100)
    batch, _ = s.walk(s.rollout(), "with_logprobs")
    batch.ref_logprobs = batch.old_logprobs - 0.1
    s.compute_advantages(batch)
    s.update(batch)
    assert s.state.kl_ctl.value == 0.1


def test_reward_model_ranks_responses_as_constructed(letter_rm_dir):
    rm = ModelReward(letter_rm_dir, batch_size=2, device="cpu")
    prompts = ["<|im_start|>user\nsay a<|im_end|>\n<|im_start|>assistant\n"] * 3
    scores = rm(prompts, ["xyza", "xyzb", "aaab"])
    assert scores[0] == pytest.approx(1.0, abs=1e-4)  # ends in 'a'
    assert abs(scores[1]) < 0.5 and abs(scores[2]) < 0.5
    assert scores[0] > scores[1] and scores[0] > scores[2]
    assert not rm.model.training


def test_session_scores_with_the_reward_model(tiny_model_dir, prompts_file, tmp_path, letter_rm_dir):
    s = make_ppo(tiny_model_dir, prompts_file, tmp_path, reward=None, reward_model_name_or_path=letter_rm_dir,
                 clip_range_score=0.5)
    assert [f.name for f in s.state.reward_fns] == ["reward_model"]
    batch = s.rollout()
    s.score(batch)
    batch = s.latest(batch)
    raw = torch.tensor(ModelReward(letter_rm_dir, device="cpu")(batch.prompt_texts, batch.response_texts))
    torch.testing.assert_close(batch.scores, raw.clamp(-0.5, 0.5), atol=1e-5, rtol=0)
    assert "critic/value_loss" in s.update(batch)


def fixed_scores(prompts, responses, **fields):
    return [1.0, 2.0, 3.0, 40.0]


def test_clip_range_score_clips(tiny_model_dir, prompts_file, tmp_path):
    s = make_ppo(tiny_model_dir, prompts_file, tmp_path, reward=fixed_scores, clip_range_score=10.0)
    batch = s.rollout()
    s.score(batch)
    batch = s.latest(batch)
    assert batch.scores.tolist() == [1.0, 2.0, 3.0, 10.0]
    assert batch.stats["reward/raw_mean"] == pytest.approx(11.5)


def test_normalize_reward_uses_running_statistics_then_clips(tiny_model_dir, prompts_file, tmp_path):
    # PaddleNLP's order: normalise with the running mean/std (updated with this batch first), then clip.
    s = make_ppo(tiny_model_dir, prompts_file, tmp_path, reward=fixed_scores, normalize_reward=True,
                 clip_range_score=1.0)
    batch = s.rollout()
    s.score(batch)
    batch = s.latest(batch)
    std = math.sqrt(1085 / 3)  # deviations from 11.5: -10.5, -9.5, -8.5, 28.5
    want = [(x - 11.5) / std for x in (1, 2, 3)] + [1.0]  # 28.5 / 19.02 = 1.499 is clipped to 1
    assert batch.scores.tolist() == pytest.approx(want, abs=1e-5)
    batch = s.rollout()
    s.score(batch)  # the same rewards again (a new batch: one is scored once): 8 seen, mean 11.5, m2 = 2 x 1085
    batch = s.latest(batch)
    std2 = math.sqrt(2170 / 7)
    assert batch.scores.tolist() == pytest.approx([(x - 11.5) / std2 for x in (1, 2, 3)] + [1.0], abs=1e-5)


def test_grpo_forces_the_normalisations_off(tmp_path):
    common = dict(train_datasets="x.jsonl", normalize_reward=True, normalize_advantage=True, rollout_n=4,
                  global_batch_size=4)
    grpo = load_arguments(None, overrides=dict(rl_algorithm="grpo", **common))
    assert grpo.normalize_reward is False and grpo.normalize_advantage is False
    ppo = load_arguments(None, overrides=dict(rl_algorithm="ppo", **common))
    assert ppo.normalize_reward is True and ppo.normalize_advantage is True
