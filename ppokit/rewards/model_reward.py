"""A transformers sequence-classification reward model (num_labels=1) as a RewardFn."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ppokit.rewards.errors import RewardError


class ModelReward:
    """Scores the text prompt + response (the prompt is already templated; no special tokens are added),
    in batches of `batch_size`, right-padded, in eval mode under no_grad. The score is the model's single
    logit at the last non-pad token."""

    def __init__(self, path: str, batch_size: int = 8, device: str | None = None,
                 max_length: int | None = None, dtype: torch.dtype | None = None):
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        try:
            tokenizer = AutoTokenizer.from_pretrained(path)
            model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=1, dtype=dtype)
        except (OSError, ValueError) as exc:
            raise RewardError(f"cannot load a sequence-classification reward model from {path!r}: {exc}") from exc
        if tokenizer.pad_token is None:
            if tokenizer.eos_token is None:
                raise RewardError(f"the tokenizer at {path!r} has neither a pad nor an eos token; give it a pad token")
            tokenizer.pad_token = tokenizer.eos_token
        tokenizer.padding_side = "right"
        model.config.pad_token_id = tokenizer.pad_token_id
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.model = model.to(self.device).eval()
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.max_length = max_length
        self.path = path

    @torch.no_grad()
    def __call__(self, prompts: Sequence[str], responses: Sequence[str], **fields: Any) -> list[float]:
        texts = [p + r for p, r in zip(prompts, responses)]
        scores: list[float] = []
        for start in range(0, len(texts), self.batch_size):
            enc = self.tokenizer(
                texts[start : start + self.batch_size],
                return_tensors="pt",
                padding=True,
                truncation=self.max_length is not None,
                max_length=self.max_length,
                add_special_tokens=False,
            ).to(self.device)
            logits = self.model(**enc).logits
            scores.extend(logits[:, 0].float().cpu().tolist())
        return scores
