"""A transformers sequence-classification reward model (num_labels=1) as a RewardFn.

Loading and scoring are `ppokit.models.reward_model`'s (`load_reward_model`, `score_texts`); this
file only adapts them to the RewardFn call and turns a load failure into a `RewardError`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ppokit.models.reward_model import load_reward_model, score_texts
from ppokit.rewards.errors import RewardError


class ModelReward:
    """Scores the text prompt + response (the prompt is already templated; no special tokens are added),
    in batches of `batch_size`, right-padded, in eval mode under no_grad. The score is the model's single
    logit at the last non-pad token."""

    def __init__(self, path: str, batch_size: int = 8, device: str | None = None,
                 max_length: int | None = None, dtype: torch.dtype | None = None):
        from transformers import AutoTokenizer

        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        try:
            tokenizer = AutoTokenizer.from_pretrained(path)
            if tokenizer.pad_token is None:
                if tokenizer.eos_token is None:
                    raise RewardError(f"the tokenizer at {path!r} has neither a pad nor an eos token; give it a pad "
                                      "token")
                tokenizer.pad_token = tokenizer.eos_token
            model = load_reward_model(path, dtype=dtype or torch.float32, device=self.device, tokenizer=tokenizer)
        except (OSError, ValueError) as exc:
            raise RewardError(f"cannot load a sequence-classification reward model from {path!r}: {exc}") from exc
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.max_length = max_length
        self.path = path

    def __call__(self, prompts: Sequence[str], responses: Sequence[str], **fields: Any) -> list[float]:
        return score_texts(self.model, self.tokenizer, list(prompts), list(responses), batch_size=self.batch_size,
                           max_length=self.max_length).tolist()
