"""`reward_on_error: skip_group` keeps every rank's batch at one size (issue #30, fault 9).

A rank that dropped a failed group would otherwise run fewer micro-batches than the others, and their all-reduces
and ZeRO-3 gathers would stop matching (an NCCL hang). Every rank keeps as many whole groups as the rank that kept
fewest; the one-process tests stand in for the other rank by patching the collective, the two-process test runs it.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from ppokit.rewards import NamedReward, RewardServerError
from ppokit.training import phases
from ppokit.training.batch import RolloutBatch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "distributed"))
from dist_helpers import tail, torchrun  # noqa: E402

ARGS = SimpleNamespace(rollout_n=2, reward_on_error="skip_group", enable_overlong_reward_buffer=False,
                       normalize_reward=False, clip_range_score=10.0)


def batch_of(n: int) -> RolloutBatch:
    return RolloutBatch(records=[{} for _ in range(n)], group_ids=torch.arange(n) // 2, prompt_texts=["p"] * n,
                        response_texts=[chr(97 + i) * (i + 1) for i in range(n)],
                        input_ids=torch.zeros(n, 5, dtype=torch.long), attention_mask=torch.ones(n, 5, dtype=torch.long),
                        response_mask=torch.ones(n, 3), prompt_len=2, finish_reasons=["stop"] * n)


def state_failing(items: set[int]):
    def server(prompts, responses, **fields):
        return [None if i in items else float(len(r)) for i, r in enumerate(responses)]

    return SimpleNamespace(reward_fns=[NamedReward("reward_server", server, allow_none=True, locate_errors=False)],
                           skipped_groups=0, reward_normalizer=None, args=ARGS)


def test_a_rank_keeps_only_as_many_groups_as_the_fewest_rank(monkeypatch):
    """This rank's 4 groups all scored, another rank kept 2: this one keeps its first 2 whole groups."""
    monkeypatch.setattr(phases, "all_ranks_min", lambda value: min(value, 2))
    out = phases.score(state_failing(set()), batch_of(8))
    assert out.group_ids.tolist() == [0, 0, 1, 1]
    assert out.scores.tolist() == [1.0, 2.0, 3.0, 4.0]
    assert out.stats["reward/groups_dropped_to_balance_ranks"] == 2.0 and out.stats["reward/skipped_groups"] == 0.0


def test_failed_groups_go_first_then_the_balance(monkeypatch):
    monkeypatch.setattr(phases, "all_ranks_min", lambda value: min(value, 2))
    state = state_failing({3})  # group 1 fails: groups 0, 2, 3 are left; the fewest rank kept 2 -> groups 0 and 2
    out = phases.score(state, batch_of(8))
    assert out.group_ids.tolist() == [0, 0, 2, 2] and state.skipped_groups == 1
    assert out.stats["reward/groups_dropped_to_balance_ranks"] == 1.0


def test_every_rank_raises_when_one_rank_has_nothing_left(monkeypatch):
    monkeypatch.setattr(phases, "all_ranks_min", lambda value: 0)
    with pytest.raises(RewardServerError, match="every prompt group of another rank"):
        phases.score(state_failing(set()), batch_of(4))


def test_one_process_without_failures_keeps_the_batch():
    out = phases.score(state_failing(set()), batch_of(4))
    assert len(out) == 4 and "reward/groups_dropped_to_balance_ranks" not in out.stats


@pytest.mark.slow
def test_two_ranks_end_the_score_phase_with_equal_batches():
    done = torchrun(Path(__file__).resolve().parents[1] / "distributed" / "skip_group_ranks.py", timeout=300)
    assert done.returncode == 0, tail(done)
    lines = sorted(line for line in done.stdout.splitlines() if line.startswith("rank "))
    assert lines == ["rank 0: 4 sequences, 2 groups, dropped 0, groups [0, 2]",
                     "rank 1: 4 sequences, 2 groups, dropped 1, groups [10, 11]"], tail(done)
