"""Multi-turn batches with tool turns on 2 ranks under ZeRO-2 and ZeRO-3 (issue 27): the split update equals the
1-process update of the whole batch, and a full step with tools runs and logs the same metrics on both ranks.

The batch comes from a scripted engine (`dist_helpers.ToolScript`): every row calls multiply, gets the result as a
tool turn (loss_mask 0) and answers; see test_update_two_ranks.py for how the halves and the reference line up.
"""

import pytest
import torch
from dist_helpers import TOOL_OVERRIDES
from test_update_two_ranks import check_same_update, one_process_update, run_two_ranks


@pytest.fixture(scope="module")
def tool_reference(tmp_path_factory, tiny_model_dir):
    ref = one_process_update(tmp_path_factory.mktemp("tool_reference"), tiny_model_dir, engine="ToolScript",
                             **TOOL_OVERRIDES)
    batch = torch.load(ref["batch"], weights_only=False)
    tool_tokens = batch.response_mask - batch.loss_mask
    assert (tool_tokens.sum(1) > 0).all()  # every row holds a tool turn the loss must skip
    assert all([t["role"] for t in turns] == ["assistant", "tool", "assistant"] for turns in batch.turns)
    assert ref["metrics"]["tools/calls_per_sample"] == 1.0 and ref["metrics"]["groups/zero_std_frac"] < 1.0
    return ref


def test_zero2_two_ranks_update_with_tool_turns_equals_one_process(tool_reference, tiny_model_dir, tmp_path):
    ranks = run_two_ranks(tool_reference, tiny_model_dir, tmp_path, "stage2")
    check_same_update(tool_reference, ranks, "ZeRO-2, tool turns")
    assert ranks[0]["metrics"]["tools/calls_per_sample"] == 1.0


@pytest.mark.slow
def test_zero3_two_ranks_update_with_tool_turns_equals_one_process_and_steps(tool_reference, tiny_model_dir,
                                                                            tmp_path):
    ranks = run_two_ranks(tool_reference, tiny_model_dir, tmp_path, "stage3", extra_step=True)
    check_same_update(tool_reference, ranks, "ZeRO-3, tool turns")
    steps = [r["step_metrics"] for r in ranks]
    assert steps[0] == steps[1]  # gathered once, the same on both ranks
    assert steps[0]["tools/calls_per_sample"] == 1.0 and steps[0]["turns/mean"] == 2.0
    assert steps[0]["tools/errors"] == 0 and steps[0]["actor/grad_norm"] > 0
