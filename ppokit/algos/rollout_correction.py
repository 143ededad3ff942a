"""Rollout–train mismatch: how far the rollout engine's log-probs are from the trainer's, and
truncated importance sampling (TIS) to correct the policy loss for it.

The rollout engine (vLLM's sampler, or generate with a KV cache in another precision) and the
trainer's forward pass compute slightly different probabilities for the same tokens, so the
responses were sampled from pi_rollout while the PPO ratio assumes pi_old. TIS re-weights each
token's (or each sequence's) policy loss by the truncated ratio pi_old / pi_rollout (Yao et al.,
"Your efficient RL framework secretly brings you off-policy RL training", 2025; verl's and TRL's
rollout correction).

Shapes: ``old_logp`` (B, T) the trainer's log-probs of the sampled tokens under the policy that
sampled them, ``rollout_logp`` (B, T) the engine's log-probs of the same tokens, ``mask`` (B, T)
valid response tokens.
"""

from __future__ import annotations

import torch

from .masked import as_float_mask, masked_mean

__all__ = ["IS_LEVELS", "truncated_is_weights", "logprob_mismatch"]

IS_LEVELS = ("off", "token", "sequence")
LOG_RATIO_CLAMP = 20.0


def truncated_is_weights(
    old_logp: torch.Tensor, rollout_logp: torch.Tensor, mask: torch.Tensor, level: str, cap: float
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Detached TIS weights to multiply the per-token policy loss with.

    old_logp, rollout_logp, mask: (B, T) -> (weights (B, T), metrics).
    token:    w_t = min(exp(old_t - rollout_t), cap)
    sequence: w_i = min(exp(sum over valid t of (old_t - rollout_t)), cap), the same for every token of i
    off:      w = 1.
    Log-ratios are clamped to +-20 before exp. Masked positions get weight 0. ``metrics``:
    ``is_weight_mean`` (valid-token mean of w) and ``is_clipfrac`` (valid tokens whose weight the
    cap truncated), 0-d tensors.
    """
    if level not in IS_LEVELS:
        raise ValueError(f"rollout_is must be one of {', '.join(IS_LEVELS)}, got {level!r}")
    if cap <= 0:
        raise ValueError(f"rollout_is_cap must be > 0, got {cap}")
    m = as_float_mask(mask, old_logp)
    with torch.no_grad():
        log_ratio = torch.where(m.bool(), old_logp.detach() - rollout_logp.detach(), torch.zeros_like(old_logp))
        if level == "off":
            ratio = torch.ones_like(log_ratio)
        elif level == "token":
            ratio = torch.exp(log_ratio.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))
        else:
            seq = log_ratio.sum(-1, keepdim=True).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
            ratio = torch.exp(seq).expand_as(log_ratio)
        weights = ratio.clamp(max=cap) * m
        metrics = {
            "is_weight_mean": masked_mean(weights, m),
            "is_clipfrac": masked_mean((ratio > cap).to(m.dtype), m),
        }
    return weights, metrics


def logprob_mismatch(
    old_logp: torch.Tensor, rollout_logp: torch.Tensor, mask: torch.Tensor
) -> dict[str, torch.Tensor]:
    """Mean and max of |old_logp - rollout_logp| over valid tokens (0 where there are none).

    old_logp, rollout_logp, mask: (B, T) -> {"logprob_diff": 0-d, "logprob_diff_max": 0-d}.
    """
    m = as_float_mask(mask, old_logp)
    with torch.no_grad():
        diff = torch.where(m.bool(), (old_logp.detach() - rollout_logp.detach()).abs(), torch.zeros_like(old_logp))
        return {"logprob_diff": masked_mean(diff, m), "logprob_diff_max": diff.max() if diff.numel() else diff.sum()}
