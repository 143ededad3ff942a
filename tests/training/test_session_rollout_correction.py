"""Rollout–train mismatch through the Session on CPU, with the hf engine's log-probs: rollout/logprob_diff and
truncated importance sampling (rollout_is) on the policy loss."""

import math
from dataclasses import replace

import pytest
from session_helpers import distinct_chars, tiny_overrides

from ppokit.args import load_arguments
from ppokit.session import Session


def make(tiny_model_path, prompts_file, tmp_path, **extra):
    args = load_arguments(None, overrides=tiny_overrides(tiny_model_path, prompts_file, tmp_path, **extra))
    return Session(args, reward_functions=[distinct_chars])


def test_agreeing_engines_give_weight_one(tiny_model_path, prompts_file, tmp_path):
    s = make(tiny_model_path, prompts_file, tmp_path, rollout_is="token", rollout_is_cap=2.0)
    batch = s.rollout()
    assert batch.rollout_logprobs is not None and batch.rollout_logprobs.shape == batch.response_mask.shape
    metrics = s.update(batch)
    # the hf engine samples from the very weights the trainer scores with; what differs is min_dec_len=1
    # (EOS masked at the first step, so the engine's first-token distribution is renormalised) and rounding
    assert 0 < metrics["rollout/logprob_diff"] < 1e-3 and metrics["rollout/logprob_diff/max"] < 1e-2
    assert math.isclose(metrics["rollout/is_weight_mean"], 1.0, abs_tol=1e-2)
    assert metrics["rollout/is_clipfrac"] == 0.0


def test_a_planted_mismatch_is_measured_and_clipped_at_the_cap(tiny_model_path, prompts_file, tmp_path):
    plain = make(tiny_model_path, prompts_file, tmp_path / "a")
    corrected = make(tiny_model_path, prompts_file, tmp_path / "b", rollout_is="token", rollout_is_cap=2.0)
    batch, _ = plain.walk(plain.rollout(), "advantages")
    # the engine "said" every token was 4x less likely than the trainer finds: ratio 4 > cap 2 -> weight 2
    planted = replace(batch, rollout_logprobs=(batch.rollout_logprobs - math.log(4.0)) * batch.response_mask,
                      advantages=batch.response_mask.clone())
    # advantage 1 on every token: on-policy (ratio 1) the token-mean policy loss is -1, and -2 once each
    # token's loss carries the capped weight 2
    batch = replace(batch, advantages=batch.response_mask.clone())
    off = plain.update(batch)
    on = corrected.update(planted)
    assert math.isclose(on["rollout/logprob_diff"], math.log(4.0), rel_tol=1e-2)
    assert on["rollout/is_weight_mean"] == pytest.approx(2.0) and on["rollout/is_clipfrac"] == 1.0
    assert "rollout/is_weight_mean" not in off  # rollout_is off: the loss is not re-weighted
    assert off["actor/pg_loss"] == pytest.approx(-1.0, rel=1e-5)
    assert on["actor/pg_loss"] == pytest.approx(-2.0, rel=1e-5)


def test_rollout_is_without_engine_logprobs_is_explained(tiny_model_path, prompts_file, tmp_path):
    s = make(tiny_model_path, prompts_file, tmp_path, rollout_is="sequence")
    batch = s.rollout()
    batch.rollout_logprobs = None
    with pytest.raises(ValueError, match="rollout_is=sequence needs the rollout engine's log-probs"):
        s.update(batch)
