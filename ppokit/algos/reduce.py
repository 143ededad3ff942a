"""Loss reduction (``loss_agg_mode``) with whole-mini-batch denominators.

Modes, for a per-token loss L (B, T) and mask m (B, T); a *sequence* is a row with at least one
valid token (rows without any are ignored everywhere):
  token-mean               sum(L m) / sum(m)
  seq-mean-token-mean      mean over sequences of (sum_t L m / sum_t m)
  seq-mean-token-sum       mean over sequences of sum_t L m
  seq-mean-token-sum-norm  sum(L m) / (num_sequences C), C = ``norm_constant`` (Dr.GRPO; the
                           trainer passes max_dec_len)

Micro-batches and data-parallel ranks. Each mode is (sum over sequences or tokens of a
numerator) / (a count). Computing the count locally per micro-batch would weight micro-batches
wrongly (a short micro-batch would count as much as a long one). So the trainer computes the
counts of the WHOLE mini-batch once — ``global_denominators(masks)`` over all its micro-batch
masks, then an all-reduce SUM of both counts across data-parallel ranks — and passes them as
``global_tokens`` / ``global_seqs``. Each micro-batch loss is then its own numerator over the
global count, and the sum of all micro-batch losses (over micro-batches and ranks) is exactly
the whole mini-batch loss, hence the same gradient. Two consequences for the caller:
  * do not divide by the number of accumulation steps (DeepSpeed's ``engine.backward`` does by
    default: multiply the loss by gradient_accumulation_steps, or use ``scale_wrt_gas=False``);
  * DDP/DeepSpeed average gradients over ranks: multiply the loss by world_size to keep the sum.
Without the global arguments the local counts are used: the micro-batch is its own mini-batch.
"""

from __future__ import annotations

import torch

from .masked import as_float_mask

__all__ = ["reduce_loss", "global_denominators", "REDUCTIONS"]


def _count(local: torch.Tensor, given, like: torch.Tensor) -> torch.Tensor:
    """The denominator: ``given`` (global count) if not None, else ``local``; at least 1.

    local: 0-d, given: int | float | 0-d tensor | None, like: tensor giving dtype/device -> 0-d.
    (A zero count only happens when the numerator is 0 too; clamping keeps the result 0, not NaN.)
    """
    value = local if given is None else torch.as_tensor(given, device=like.device)
    return value.to(dtype=like.dtype, device=like.device).clamp_min(1.0)


def _token_mean(loss, m, norm_constant, global_tokens, global_seqs):
    """sum(L m) / tokens. loss, m: (B, T) -> 0-d."""
    return (loss * m).sum() / _count(m.sum(), global_tokens, loss)


def _seq_mean_token_mean(loss, m, norm_constant, global_tokens, global_seqs):
    """sum_i (sum_t L m / sum_t m) / sequences. loss, m: (B, T) -> 0-d."""
    tokens = m.sum(-1)
    per_seq = (loss * m).sum(-1) / tokens.clamp_min(1.0)
    return per_seq.sum() / _count((tokens > 0).sum(), global_seqs, loss)


def _seq_mean_token_sum(loss, m, norm_constant, global_tokens, global_seqs):
    """sum(L m) / sequences. loss, m: (B, T) -> 0-d."""
    return (loss * m).sum() / _count((m.sum(-1) > 0).sum(), global_seqs, loss)


def _seq_mean_token_sum_norm(loss, m, norm_constant, global_tokens, global_seqs):
    """sum(L m) / (sequences C). loss, m: (B, T) -> 0-d."""
    if norm_constant is None or norm_constant <= 0:
        raise ValueError("loss_agg_mode 'seq-mean-token-sum-norm' needs a positive norm_constant (max_dec_len)")
    seqs = _count((m.sum(-1) > 0).sum(), global_seqs, loss)
    return (loss * m).sum() / (seqs * float(norm_constant))


REDUCTIONS = {
    "token-mean": _token_mean,
    "seq-mean-token-mean": _seq_mean_token_mean,
    "seq-mean-token-sum": _seq_mean_token_sum,
    "seq-mean-token-sum-norm": _seq_mean_token_sum_norm,
}


def reduce_loss(
    loss: torch.Tensor,
    mask: torch.Tensor,
    mode: str,
    norm_constant: float | None = None,
    global_tokens=None,
    global_seqs=None,
) -> torch.Tensor:
    """Reduce a per-token loss to a scalar according to ``mode`` (see the module docstring).

    loss: (B, T), mask: (B, T) -> 0-d tensor (differentiable in ``loss``), at least float32.
    norm_constant: C of ``seq-mean-token-sum-norm`` (required there, ignored elsewhere).
    global_tokens / global_seqs: valid-token / sequence counts of the whole mini-batch (all
    micro-batches, all ranks), from ``global_denominators``; ``token-mean`` uses the first, the
    ``seq-*`` modes the second. Masked positions of ``loss`` are ignored whatever they hold.
    """
    if mode not in REDUCTIONS:
        raise ValueError(f"unknown loss_agg_mode {mode!r}; choose from {sorted(REDUCTIONS)}")
    loss = loss.to(torch.promote_types(loss.dtype, torch.float32))  # bf16 cannot count tokens exactly
    m = as_float_mask(mask, loss)
    loss = torch.where(m.bool(), loss, torch.zeros_like(loss))
    return REDUCTIONS[mode](loss, m, norm_constant, global_tokens, global_seqs)


def global_denominators(masks: list[torch.Tensor]) -> dict[str, torch.Tensor]:
    """Counts of the whole mini-batch from the masks of all its micro-batches (this rank).

    masks: list of (B_k, T_k) -> {"tokens": 0-d int64, "seqs": 0-d int64}: the number of valid
    tokens and of sequences with at least one valid token. For data parallelism all-reduce
    (SUM) both across ranks, then pass them to ``reduce_loss`` as global_tokens / global_seqs.
    """
    if not masks:
        raise ValueError("global_denominators needs at least one mask")
    device = masks[0].device
    tokens = torch.zeros((), dtype=torch.int64, device=device)
    seqs = torch.zeros((), dtype=torch.int64, device=device)
    for mask in masks:
        b = mask.bool()
        tokens = tokens + b.sum()
        seqs = seqs + b.any(dim=-1).sum()
    return {"tokens": tokens, "seqs": seqs}
