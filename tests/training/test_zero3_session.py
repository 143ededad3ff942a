"""A Session under `sharding: stage3` builds its actor (and PPO critic) partitioned from the start, keeps the reference
whole, trains, and saves weights that reload (issue #30, fault 7; DeepSpeed's CPU accelerator, one process)."""

from __future__ import annotations

import torch
from session_helpers import distinct_chars, tiny_overrides

from ppokit.args import load_arguments
from ppokit.models import load_causal_lm
from ppokit.models.weights import gathered
from ppokit.session import Session


def test_stage3_session_builds_partitioned_trains_and_saves(tiny_model_path, prompts_file, tmp_path):
    args = load_arguments(None, overrides=tiny_overrides(
        tiny_model_path, prompts_file, tmp_path, rl_algorithm="ppo", rollout_n=1, sharding="stage3", kl_coeff=0.05,
        max_steps=1))
    s = Session(args, reward_functions=[distinct_chars])
    actor, critic = s.state.policy.engine.module, s.state.critic.engine.module
    assert all(hasattr(p, "ds_id") for p in actor.parameters())
    assert all(hasattr(p, "ds_id") for p in critic.backbone.parameters())
    assert not any(hasattr(p, "ds_id") for p in s.state.policy.reference.parameters())  # no engine gathers it
    with gathered(actor):
        before = {n: p.detach().clone() for n, p in actor.named_parameters()}
    metrics = s.step()
    assert metrics["actor/grad_norm"] > 0 and metrics["critic/grad_norm"] > 0
    s.save(final=True)  # save_strategy no: the HF folder in output_dir only
    saved = load_causal_lm(args.output_dir)
    with gathered(actor):
        for name, p in saved.named_parameters():
            torch.testing.assert_close(p.detach(), dict(actor.named_parameters())[name].detach())
        assert any(not torch.equal(before[n], p.detach()) for n, p in actor.named_parameters())
