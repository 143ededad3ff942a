"""Critic (value) loss: PPO's clipped value regression."""

from __future__ import annotations

import torch

from .masked import as_float_mask, masked_mean

__all__ = ["clipped", "VALUE_LOSSES"]


def clipped(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    clip: float | None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Clipped value loss, per token, not reduced.

    values: (B, T) with gradient, old_values: (B, T), returns: (B, T), mask: (B, T)
    -> (loss (B, T), {"vf_clipfrac": 0-d tensor}).
    V_c = clip(V, V_old - clip, V_old + clip); loss = 0.5 max((V - R)^2, (V_c - R)^2), 0 on
    masked tokens. ``clip=None`` gives the plain 0.5 (V - R)^2. ``vf_clipfrac`` is the fraction
    of valid tokens where the clipped term is the larger one (so it is the active one).
    old_values and returns are treated as constants.
    """
    old = old_values.detach()
    target = returns.detach()
    plain = (values - target) ** 2
    if clip is None:
        loss, active = plain, torch.zeros_like(plain, dtype=torch.bool)
    else:
        if clip < 0:
            raise ValueError(f"value clip must be >= 0, got {clip}")
        v_clipped = old + (values - old).clamp(-clip, clip)
        clipped_sq = (v_clipped - target) ** 2
        loss, active = torch.maximum(plain, clipped_sq), clipped_sq > plain
    m = as_float_mask(mask, loss)
    loss = torch.where(m.bool(), 0.5 * loss, torch.zeros_like(loss))
    with torch.no_grad():
        metrics = {"vf_clipfrac": masked_mean(active.to(m.dtype), m)}
    return loss, metrics


VALUE_LOSSES = {"clipped": clipped}
