"""Policy-gradient losses: PPO clipped surrogate (with dual clip), GSPO and CISPO.

All share one signature::

    fn(logp, old_logp, advantages, mask, clip_ratio_low, clip_ratio_high, clip_ratio_c=None)
        -> (loss (B, T), metrics)

``logp`` (B, T) are the current policy's log-probs of the sampled tokens (with gradient),
``old_logp`` (B, T) those of the policy that sampled them, ``advantages`` (B, T).
``old_logp`` and ``advantages`` are treated as constants (detached). The loss is per token and
NOT reduced (reduce it with ``reduce.reduce_loss``); masked positions are exactly 0.
``metrics`` holds detached 0-d tensors: ``clipfrac`` (valid tokens where the clip is active),
``clipfrac_lower`` (valid tokens where the dual clip bites) and ``approx_kl`` (the mean of
old_logp - logp over valid tokens, i.e. the k1 estimate of KL(pi_old || pi)).
"""

from __future__ import annotations

import torch

from ppokit.algorithms import POLICY_LOSS_TABLE

from .masked import as_float_mask, masked_mean

__all__ = ["vanilla", "gspo", "cispo", "POLICY_LOSSES", "policy_loss"]

POLICY_LOSSES: dict = {}  # name (a row of ppokit.algorithms.POLICY_LOSS_TABLE) -> fn, filled by @policy_loss


def policy_loss(name: str):
    """Register ``fn`` as the policy loss ``name`` (``@policy_loss("gspo")``); the name needs its row in
    ``ppokit.algorithms.POLICY_LOSS_TABLE``, which the ``policy_loss`` key's choices come from."""

    def register(fn):
        if name not in POLICY_LOSS_TABLE:
            raise ValueError(f"policy loss {name!r} has no row in ppokit.algorithms.POLICY_LOSS_TABLE; add one")
        if name in POLICY_LOSSES:
            raise ValueError(f"policy loss {name!r} is registered twice")
        POLICY_LOSSES[name] = fn
        return fn

    return register

LOG_RATIO_CLAMP = 20.0


def _check(clip_ratio_low: float, clip_ratio_high: float, clip_ratio_c: float | None) -> None:
    """Validate clip parameters: eps_low, eps_high >= 0 and dual-clip c > 1 when given."""
    if clip_ratio_low < 0 or clip_ratio_high < 0:
        raise ValueError(f"clip ratios must be >= 0, got low={clip_ratio_low}, high={clip_ratio_high}")
    if clip_ratio_c is not None and clip_ratio_c <= 1:
        raise ValueError(f"dual-clip constant clip_ratio_c must be > 1, got {clip_ratio_c}")


def _clipped_surrogate(ratio, adv, lo, hi, c):
    """PPO clipped objective with optional dual clip, per token.

    ratio: (B, T), adv: (B, T) -> loss (B, T), clip_active (B, T) bool, dual_active (B, T) bool.
    L = max(-A rho, -A clip(rho, 1-lo, 1+hi)); where A < 0 and c is given, L = min(L, -A c).
    """
    unclipped = -adv * ratio
    clipped = -adv * ratio.clamp(1.0 - lo, 1.0 + hi)
    loss = torch.maximum(unclipped, clipped)
    clip_active = clipped > unclipped
    if c is None:
        return loss, clip_active, torch.zeros_like(clip_active)
    cap = -adv * c
    dual_active = (adv < 0) & (loss > cap)
    loss = torch.where(dual_active, cap, loss)
    return loss, clip_active & ~dual_active, dual_active


def _finish(loss, mask, clip_active, dual_active, logp, old_logp):
    """Zero masked positions and gather the metrics.

    loss, mask, clip_active, dual_active, logp, old_logp: (B, T) -> (loss (B, T), metrics dict).
    """
    m = as_float_mask(mask, loss)
    loss = torch.where(m.bool(), loss, torch.zeros_like(loss))
    with torch.no_grad():
        metrics = {
            "clipfrac": masked_mean(clip_active.to(m.dtype), m),
            "clipfrac_lower": masked_mean(dual_active.to(m.dtype), m),
            "approx_kl": masked_mean(old_logp.detach() - logp.detach(), m),
        }
    return loss, metrics


@policy_loss("vanilla")
def vanilla(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_ratio_low: float,
    clip_ratio_high: float,
    clip_ratio_c: float | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO clipped surrogate with decoupled clip range (DAPO clip-higher) and dual clip.

    logp, old_logp, advantages, mask: (B, T) -> (loss (B, T), metrics).
    rho = exp(clamp(logp - old_logp, -20, 20));
    L = max(-A rho, -A clip(rho, 1 - eps_low, 1 + eps_high)); for A < 0 also L = min(L, -A c).
    """
    _check(clip_ratio_low, clip_ratio_high, clip_ratio_c)
    log_ratio = (logp - old_logp.detach()).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    loss, clip_active, dual_active = _clipped_surrogate(
        torch.exp(log_ratio), advantages.detach(), clip_ratio_low, clip_ratio_high, clip_ratio_c
    )
    return _finish(loss, mask, clip_active, dual_active, logp, old_logp)


@policy_loss("gspo")
def gspo(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_ratio_low: float,
    clip_ratio_high: float,
    clip_ratio_c: float | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """GSPO (sequence-level importance ratio), in its token form (GSPO-token).

    logp, old_logp, advantages, mask: (B, T) -> (loss (B, T), metrics).
    s_i = exp(mean over valid t of (logp - old_logp)) (log clamped to +-20);
    s_it = sg[s_i] exp(logp_t - sg[logp_t]): its value is s_i, its gradient s_i grad logp_t.
    Then the clipped objective of ``vanilla`` with s_it in place of rho (dual clip when c is
    given). GSPO's clip ranges are much smaller than PPO's (paper: 3e-4 / 4e-4).
    """
    _check(clip_ratio_low, clip_ratio_high, clip_ratio_c)
    m = as_float_mask(mask, logp)
    seq_log_ratio = masked_mean(logp.detach() - old_logp.detach(), m, dim=-1)
    seq_log_ratio = seq_log_ratio.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    ratio = torch.exp(seq_log_ratio[:, None] + logp - logp.detach())
    loss, clip_active, dual_active = _clipped_surrogate(
        ratio, advantages.detach(), clip_ratio_low, clip_ratio_high, clip_ratio_c
    )
    return _finish(loss, mask, clip_active, dual_active, logp, old_logp)


@policy_loss("cispo")
def cispo(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_ratio_low: float,
    clip_ratio_high: float,
    clip_ratio_c: float | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """CISPO: clipped importance-sampling weight, gradient only through logp.

    logp, old_logp, advantages, mask: (B, T) -> (loss (B, T), metrics).
    loss_t = -sg[clip(rho_t, 1 - eps_low, 1 + eps_high)] A_t logp_t, rho as in ``vanilla``;
    so d loss_t / d logp_t = -clip(rho_t) A_t and every token keeps a gradient.
    ``clipfrac`` counts tokens whose weight was clipped; ``clipfrac_lower`` is 0 and
    ``clip_ratio_c`` is ignored (there is no dual clip in CISPO).
    """
    _check(clip_ratio_low, clip_ratio_high, None)
    with torch.no_grad():
        ratio = torch.exp((logp - old_logp).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))
        weight = ratio.clamp(1.0 - clip_ratio_low, 1.0 + clip_ratio_high)
        clip_active = weight != ratio
    loss = -weight * advantages.detach() * logp
    return _finish(loss, mask, clip_active, torch.zeros_like(clip_active), logp, old_logp)


