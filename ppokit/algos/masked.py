"""Masked reductions shared by the estimators and losses.

A mask is a (B, T) tensor of 0/1 (bool, int or float): 1 marks a valid (response) token.
Every helper ignores masked positions completely, whatever values they hold (NaN included).
"""

from __future__ import annotations

import torch

__all__ = ["masked_mean", "masked_sum", "masked_var", "masked_whiten", "as_float_mask"]


def as_float_mask(mask: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """Return ``mask`` as a 0/1 tensor of ``like``'s floating dtype and device.

    mask: any shape, bool/int/float -> same shape, dtype of ``like`` (float32 if ``like`` is not floating).
    """
    dtype = like.dtype if like.is_floating_point() else torch.float32
    return mask.to(device=like.device, dtype=dtype)


def masked_sum(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Sum of ``x`` over valid positions.

    x: (B, T), mask: (B, T) -> 0-d tensor when ``dim`` is None, else ``x`` reduced over ``dim``.
    Masked positions contribute exactly 0 (``torch.where``, so NaN/inf there do not leak).
    """
    m = as_float_mask(mask, x).bool()
    zeroed = torch.where(m, x, torch.zeros_like(x))
    return zeroed.sum() if dim is None else zeroed.sum(dim=dim)


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of ``x`` over valid positions: sum(x m) / sum(m).

    x: (B, T), mask: (B, T) -> 0-d tensor when ``dim`` is None, else ``x`` reduced over ``dim``
    (e.g. dim=-1 gives the per-sequence token mean, shape (B,)).
    Where there is no valid position the mean is 0 (not NaN).
    """
    m = as_float_mask(mask, x)
    total = masked_sum(x, m, dim)
    count = m.sum() if dim is None else m.sum(dim=dim)
    return torch.where(count > 0, total / count.clamp_min(1.0), torch.zeros_like(total))


def masked_var(x: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """Variance of ``x`` over all valid positions of the batch.

    x: (B, T), mask: (B, T) -> 0-d tensor. With ``unbiased`` the divisor is n - 1 (Bessel),
    else n, where n = number of valid positions. Fewer than two valid positions (one when
    not unbiased) give variance 0, so whitening them yields 0 rather than NaN.
    """
    m = as_float_mask(mask, x)
    mean = masked_mean(x, m)
    n = m.sum()
    sq = masked_sum((x - mean) ** 2, m)
    divisor = n - 1 if unbiased else n
    return torch.where(divisor > 0, sq / divisor.clamp_min(1.0), torch.zeros_like(sq))


def masked_whiten(
    x: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True, eps: float = 1e-8, group=None
) -> torch.Tensor:
    """Whiten ``x`` with the mean and unbiased variance of its valid positions.

    x: (B, T), mask: (B, T) -> (B, T): (x - mu) / sqrt(var + eps) on valid positions
    (plus mu back again when ``shift_mean`` is False: only the scale changes); 0 on masked ones.
    group: a torch.distributed process group (e.g. ``torch.distributed.group.WORLD``): mu and var
    are then those of the valid positions of every rank in it (count, sum and sum of squares are
    all-reduced in float64), so each rank whitens its part of the global batch identically.
    """
    if group is not None:
        return _whiten_over_group(x, mask, shift_mean, eps, group)
    m = as_float_mask(mask, x)
    mean = masked_mean(x, m)
    var = masked_var(x, m, unbiased=True)
    white = (x - mean) * torch.rsqrt(var + eps)
    if not shift_mean:
        white = white + mean
    return torch.where(m.bool(), white, torch.zeros_like(white))


def _whiten_over_group(x: torch.Tensor, mask: torch.Tensor, shift_mean: bool, eps: float, group) -> torch.Tensor:
    """``masked_whiten`` with statistics summed over the ranks of ``group``. x, mask: (B, T) -> (B, T)."""
    import torch.distributed as dist

    m = as_float_mask(mask, x)
    sums = torch.tensor([float(m.sum()), float((x * m).sum()), float((x * x * m).sum())], dtype=torch.float64,
                        device=x.device)
    if dist.get_world_size(group) > 1:
        device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend(group) == "nccl" else "cpu"
        sums = sums.to(device)
        dist.all_reduce(sums, group=group)
    n, total, total_sq = sums.tolist()
    if n < 2:
        return torch.zeros_like(x)
    mean = total / n
    var = max(total_sq - n * mean * mean, 0.0) / (n - 1)
    white = (x - mean) * (var + eps) ** -0.5
    if not shift_mean:
        white = white + mean
    return white * m
