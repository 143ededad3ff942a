"""The per-step loss config, the algorithm table's dispatch through the algos registry, and phases that
return values (no model needed)."""

import pytest
import torch

from ppokit.algorithms import ALGORITHMS
from ppokit.algos import ADVANTAGE_ESTIMATORS
from ppokit.algos.advantages import grpo, rloo
from ppokit.args import load_arguments
from ppokit.training.advantage import with_advantages
from ppokit.training.batch import RolloutBatch
from ppokit.training.update import LossConfig, chunks


def batch(scores, group_ids):
    n = len(scores)
    mask = torch.tensor([[1.0, 1.0, 0.0]] * n)
    return RolloutBatch(
        records=[{}] * n, group_ids=torch.tensor(group_ids), prompt_texts=["p"] * n, response_texts=["r"] * n,
        input_ids=torch.zeros(n, 5, dtype=torch.long), attention_mask=torch.ones(n, 5, dtype=torch.long),
        response_mask=mask, prompt_len=2, finish_reasons=["stop"] * n, scores=torch.tensor(scores),
    )


def test_loss_config_resolves_defaults_once():
    args = load_arguments(overrides={"rl_algorithm": "grpo", "rollout_n": 4, "global_batch_size": 4,
                                     "clip_range_ratio": 0.2, "clip_range_ratio_high": 0.28, "max_dec_len": 64})
    cfg = LossConfig.from_args(args)
    assert (cfg.clip_low, cfg.clip_high) == (0.2, 0.28)  # low falls back to clip_range_ratio
    assert cfg.norm_constant == 64  # loss_agg_norm_constant unset: max_dec_len
    args.loss_agg_norm_constant = 10
    assert LossConfig.from_args(args).norm_constant == 10 and cfg.norm_constant == 64  # a new step, a new config


def test_every_algorithm_has_a_registered_estimator():
    assert all(a.estimator in ADVANTAGE_ESTIMATORS for a in ALGORITHMS.values())


@pytest.mark.parametrize("name", ["grpo", "dapo", "drgrpo", "rloo"])
def test_advantages_come_from_the_registry_per_the_table(name):
    args = load_arguments(overrides={"rl_algorithm": name, "rollout_n": 2, "global_batch_size": 2, "kl_coeff": 0.0})
    before = batch([1.0, 0.0, 3.0, 3.0], [0, 0, 1, 1])
    after = with_advantages(before, args, beta=0.0)
    assert before.advantages is None and after is not before  # a new batch; the given one is unchanged
    mask = before.response_mask
    if name == "rloo":
        expected = rloo(before.scores, before.group_ids, mask)[0]
    else:
        expected = grpo(before.scores, before.group_ids, mask, norm_by_std=name != "drgrpo")[0]
    torch.testing.assert_close(after.advantages, expected, rtol=0, atol=0)
    assert after.advantages[2:].abs().sum() == 0  # a group whose scores are equal learns nothing
    assert "kl/beta" not in after.stats and "advantages/mean" in after.stats  # no KL in the reward: no beta logged


def test_advantages_without_scores_is_a_clear_error():
    args = load_arguments(overrides={"rl_algorithm": "grpo", "rollout_n": 2, "global_batch_size": 2})
    unscored = batch([1.0, 0.0], [0, 0])
    unscored.scores = None
    with pytest.raises(ValueError, match="score the batch first"):
        with_advantages(unscored, args, beta=0.0)


def test_chunks_cover_the_range_in_order():
    assert chunks(5, 2) == [[0, 1], [2, 3], [4]]
    assert chunks(0, 3) == []
