"""Auxiliary language-model losses on the rollout's own responses.

VAPO's positive-example LM loss (Yue et al. 2025, "VAPO", section 4): an NLL term on the tokens of
responses that earned a positive outcome score, added to the PPO loss with weight mu (0.1 in the
paper) so the policy also imitates what it already got right:

    L_NLL = - sum_{i in positive} sum_t log pi(a_it | s_it) / sum_{i in positive} |o_i|

The caller reduces with ``reduce_loss(loss, positive_mask, "token-mean", global_tokens=...)``, the
denominator being the positive tokens of the whole mini-batch (all micro-batches and ranks).
"""

from __future__ import annotations

import torch

from .masked import as_float_mask

__all__ = ["positive_example_nll", "AUX_LOSSES"]


def positive_example_nll(
    logp: torch.Tensor,
    mask: torch.Tensor,
    scores: torch.Tensor,
    threshold: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token NLL on the responses whose score exceeds ``threshold``.

    logp: (B, T) token log-probs with gradient, mask: (B, T), scores: (B,) outcome scores
    -> (loss (B, T) = -logp on positive responses' valid tokens, 0 elsewhere; positive_mask (B, T) float).
    """
    m = as_float_mask(mask, logp)
    positive = (scores.to(m.device) > threshold).to(m.dtype)[:, None] * m
    loss = torch.where(positive.bool(), -logp, torch.zeros_like(logp))
    return loss, positive


AUX_LOSSES = {"positive_nll": positive_example_nll}
