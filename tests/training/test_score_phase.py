"""The score phase: skip_group when everything fails, and DAPO's overlong shaping (issue 15 #6, #9)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from ppokit.errors import PpokitError
from ppokit.rewards import NamedReward, RewardServerError
from ppokit.training.batch import RolloutBatch
from ppokit.training.phases import score


def batch_of(lengths: list[int], group_size: int) -> RolloutBatch:
    n, width = len(lengths), max(lengths)
    mask = torch.zeros(n, width)
    for i, length in enumerate(lengths):
        mask[i, :length] = 1
    return RolloutBatch(
        records=[{"source": f"train.jsonl:{i // group_size + 1}"} for i in range(n)],
        group_ids=torch.arange(n) // group_size, prompt_texts=["p"] * n, response_texts=["r" * k for k in lengths],
        input_ids=torch.zeros(n, width + 2, dtype=torch.long), attention_mask=torch.ones(n, width + 2, dtype=torch.long),
        response_mask=mask, prompt_len=2, finish_reasons=["stop"] * n)


def test_skip_group_when_every_group_fails_is_a_reward_server_error():
    unreachable = NamedReward("reward_server", lambda p, r, **f: [None] * len(r), allow_none=True, locate_errors=False)
    state = SimpleNamespace(reward_fns=[unreachable], skipped_groups=0, reward_normalizer=None)
    state.args = SimpleNamespace(rollout_n=2, reward_on_error="skip_group", enable_overlong_reward_buffer=False, normalize_reward=False,
                           clip_range_score=10.0)
    with pytest.raises(RewardServerError, match="every one of the 2 prompt groups of this step") as info:
        score(state, batch_of([3, 3, 3, 3], 2))
    assert isinstance(info.value, PpokitError) and state.skipped_groups == 2
