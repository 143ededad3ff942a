"""The sampled tokens' log-probs during `transformers.generate`, without keeping every step's scores.

`output_scores=True` would keep a (rows, vocabulary) tensor per generated token; this logits
processor keeps one step's log-softmax and, at the next step, picks the token that was sampled
from it (the last column of `input_ids`). `finish` picks the last step's token.
"""

from __future__ import annotations

import torch


class SampledTokenLogprobs:
    """A `LogitsProcessor` that records log p(sampled token) at temperature `temperature`.

    transformers runs custom processors after its own (repetition penalty, min-new-tokens) and
    before its temperature / top-k / top-p warpers, so the recorded distribution is
    softmax(processed logits / temperature), which is what the trainer recomputes
    (logits / temperature) when no penalty is set.
    """

    def __init__(self, temperature: float):
        self.temperature = temperature
        self._last: torch.Tensor | None = None  # (rows, V) log-probs of the step being sampled
        self._columns: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self._last is not None:
            self._columns.append(self._last.gather(1, input_ids[:, -1:]).squeeze(1))
        self._last = torch.log_softmax(scores.float() / self.temperature, dim=-1)
        return scores

    def finish(self, new_tokens: torch.Tensor) -> torch.Tensor:
        """(rows, T) log-probs of `new_tokens` (rows, T), the tokens generate returned after the prompt."""
        if self._last is not None:
            step = len(self._columns)
            self._columns.append(self._last.gather(1, new_tokens[:, step : step + 1].to(self._last.device)).squeeze(1))
            self._last = None
        if not self._columns:
            return torch.zeros(new_tokens.shape, dtype=torch.float32, device=new_tokens.device)
        return torch.stack(self._columns, 1).cpu()[:, : new_tokens.shape[1]]
