"""A hand-built RolloutBatch for the widget tests (no model needed)."""

from __future__ import annotations

import torch

from ppokit.training.batch import RolloutBatch


def make_batch(responses: list[str], rewards: list[float] | None, lengths: list[int],
               advantages: list[list[float]] | None = None, group_size: int = 2) -> RolloutBatch:
    """A batch of len(responses) sequences, `group_size` per prompt, responses of `lengths` tokens."""
    b, width = len(responses), max(lengths)
    mask = torch.zeros(b, width)
    for i, n in enumerate(lengths):
        mask[i, :n] = 1.0
    batch = RolloutBatch(
        records=[{"prompt": f"question {i // group_size}", "label": None} for i in range(b)],
        group_ids=torch.tensor([i // group_size for i in range(b)]),
        prompt_texts=[f"question {i // group_size}" for i in range(b)],
        response_texts=list(responses),
        input_ids=torch.zeros(b, 2 + width, dtype=torch.long),
        attention_mask=torch.ones(b, 2 + width, dtype=torch.long),
        response_mask=mask,
        prompt_len=2,
        finish_reasons=["stop"] * b,
    )
    if rewards is not None:
        batch.scores = torch.tensor(rewards)
        batch.reward_terms = {"rule": torch.tensor(rewards), "style": torch.zeros(b)}
    if advantages is not None:
        adv = torch.zeros(b, width)
        for i, row in enumerate(advantages):
            adv[i, : len(row)] = torch.tensor(row)
        batch.advantages = adv
    return batch
