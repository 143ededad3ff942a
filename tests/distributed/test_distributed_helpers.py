"""How per-rank metrics combine into the step's metrics (pure parts; the collective runs in
test_update_two_ranks.py), and the ZeRO options read from PaddleNLP's keys."""

import pytest
import torch

from ppokit.args import load_arguments
from ppokit.training.batch import RolloutBatch
from ppokit.training.engine_setup import zero_options
from ppokit.training.metrics import (
    SequenceFacts,
    batch_metrics,
    gather_metrics,
    over_ranks,
    reduce_rank_metrics,
    reduction_for,
)


def scored_batch(scores, lengths, group_ids, reasons, offset=0):
    n, width = len(scores), max(lengths)
    mask = torch.zeros(n, width)
    for i, length in enumerate(lengths):
        mask[i, :length] = 1
    return RolloutBatch(
        records=[{}] * n, group_ids=torch.tensor(group_ids) + offset, prompt_texts=["p"] * n,
        response_texts=["r"] * n, input_ids=torch.zeros(n, width + 2, dtype=torch.long),
        attention_mask=torch.ones(n, width + 2, dtype=torch.long), response_mask=mask, prompt_len=2,
        finish_reasons=reasons, scores=torch.tensor(scores), reward_terms={"rule": torch.tensor(scores) / 2},
        stats={"timing/rollout_s": 1.0},
    )


def test_reduction_rules():
    assert reduction_for("actor/pg_loss") == "sum"  # a rank's share of a global-denominator loss
    assert reduction_for("critic/value_loss") == "sum"
    assert reduction_for("throughput/tokens_per_s") == "sum"
    assert reduction_for("timing/step_s") == "max"
    assert reduction_for("response_length/max") == "max"
    assert reduction_for("reward/min") == "min"
    assert reduction_for("actor/clipfrac") == "mean"


def test_rank_metrics_combine_by_rule_and_weight():
    ranks = [{"actor/pg_loss": 0.25, "actor/clipfrac": 0.1, "timing/step_s": 2.0},
             {"actor/pg_loss": 0.5, "actor/clipfrac": 0.4, "timing/step_s": 3.0, "only/here": 7.0}]
    out = reduce_rank_metrics(ranks, weights=[8, 24])
    assert out["actor/pg_loss"] == pytest.approx(0.75)
    assert out["actor/clipfrac"] == pytest.approx((0.1 * 8 + 0.4 * 24) / 32)
    assert out["timing/step_s"] == 3.0
    assert out["only/here"] == 7.0
    assert list(out) == ["actor/pg_loss", "actor/clipfrac", "timing/step_s", "only/here"]


def test_batch_statistics_from_two_ranks_equal_those_of_the_whole_batch():
    a = scored_batch([1.0, 2.0, 3.0, 3.0], [2, 4, 4, 1], [0, 0, 1, 1], ["stop", "length", "length", "stop"])
    b = scored_batch([0.0, 5.0, 1.0, 1.0], [3, 3, 2, 4], [0, 0, 1, 1], ["stop", "stop", "length", "stop"], offset=2)
    whole = scored_batch([1.0, 2.0, 3.0, 3.0, 0.0, 5.0, 1.0, 1.0], [2, 4, 4, 1, 3, 3, 2, 4],
                         [0, 0, 1, 1, 2, 2, 3, 3], ["stop", "length", "length", "stop", "stop", "stop", "length", "stop"])
    got = batch_metrics(SequenceFacts.concat([SequenceFacts.of(a), SequenceFacts.of(b)]))
    want = batch_metrics(whole)
    want.pop("timing/rollout_s")  # stats are combined by rule, not recomputed
    assert got.keys() == want.keys()
    for key in want:
        assert got[key] == pytest.approx(want[key]), key
    assert got["groups/zero_std_frac"] == pytest.approx(0.5)  # groups 1 and 3 have equal scores


def test_ranks_with_different_reward_terms_are_refused():
    a = SequenceFacts.of(scored_batch([1.0], [1], [0], ["stop"]))
    b = SequenceFacts.of(scored_batch([1.0], [1], [0], ["stop"]))
    b.reward_terms = {"other": torch.tensor([1.0])}
    with pytest.raises(RuntimeError, match="same reward functions"):
        SequenceFacts.concat([a, b])


def test_one_process_returns_its_input():
    metrics = {"reward/mean": 1.5, "actor/pg_loss": 0.2}
    assert gather_metrics(metrics, None) is metrics
    assert over_ranks("actor/kl", 0.3, 8) == (0.3, 8)


@pytest.mark.parametrize("keys, stage, offload", [
    ({}, 0, False),
    ({"sharding": "stage3"}, 3, False),
    ({"sharding": "stage2", "offload_level": "freeze_model optimizer"}, 2, True),
    ({"sharding": "stage2 offload"}, 2, True),
    ({"sharding": "stage1", "offload_optim": True}, 1, True),
    ({"sharding": "stage3", "offload_level": "freeze_model train_model"}, 3, False),
])
def test_zero_options_from_paddle_keys(keys, stage, offload):
    args = load_arguments(None, overrides={"train_datasets": "x.jsonl", **keys})
    assert zero_options(args) == {"zero_stage": stage, "offload_optimizer": offload}


def test_vapo_lm_loss_combines_like_its_sibling_losses():
    """One table for micro-batches and ranks (issue 23): actor/positive_lm_loss is a share of a global-denominator
    loss like actor/pg_loss, summed per optimizer step and over ranks (it was averaged over ranks)."""
    from ppokit.training.metric_table import reduction

    assert reduction("actor/positive_lm_loss") == reduction("actor/pg_loss") == reduction("critic/value_loss")
    assert reduction("actor/positive_lm_loss").ranks == "sum" and reduction("actor/positive_lm_loss").micro == "share"
