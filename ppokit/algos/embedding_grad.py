"""An embedding lookup whose weight gradient is built in a buffer the caller keeps.

autograd's embedding backward returns a new zero-filled (V, H) tensor with the looked-up rows' gradients added in:
for a 49k vocabulary that is 113 MB in float32 — above glibc's 32 MB mmap threshold, so a fresh mapping the kernel
faults in and zeroes page by page, every micro-batch (≈ 28,000 page faults; docs/performance.md, ninth pass).
`kept_grad_embedding` zeroes and fills the same kept tensor instead. Where the weight is tied to an LM head, the
head's gradient reaches the weight first and autograd adds this one into it in place, so nothing (V, H)-sized is
allocated for it; otherwise autograd copies it into the weight's `.grad` (as it would the new tensor), so a buffer
reused by the next backward is never what `.grad` holds.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


class _KeptGradEmbedding(torch.autograd.Function):
    """weight[ids] (ids (...) long, weight (V, H)) -> (..., H); the weight's gradient in `workspace`'s buffer, rows
    equal to `padding_idx` getting none (as `nn.Embedding`'s)."""

    @staticmethod
    def forward(ctx, ids, weight, padding_idx, workspace):
        ctx.save_for_backward(ids)
        ctx.padding_idx, ctx.workspace, ctx.shape = padding_idx, workspace, weight.shape
        return F.embedding(ids, weight, padding_idx)

    @staticmethod
    def backward(ctx, grad_out):
        (ids,) = ctx.saved_tensors
        key = ("embedding gradient", grad_out.dtype, grad_out.device)
        buffer = ctx.workspace.get(key)
        if buffer is None or buffer.shape != ctx.shape:
            buffer = ctx.workspace[key] = grad_out.new_empty(ctx.shape)
        buffer.zero_()
        flat_ids, rows = ids.reshape(-1), grad_out.reshape(-1, ctx.shape[1])
        if ctx.padding_idx is not None:
            keep = flat_ids != ctx.padding_idx
            flat_ids, rows = flat_ids[keep], rows[keep]
        buffer.index_add_(0, flat_ids, rows)
        ctx.workspace = None
        return None, buffer, None, None


def kept_grad_embedding(ids: torch.Tensor, weight: torch.Tensor, padding_idx: int | None,
                        workspace: dict) -> torch.Tensor:
    """`F.embedding(ids, weight, padding_idx)` whose weight gradient is built in `workspace` (a dict the caller keeps
    per module and thread). The same values as `nn.Embedding`'s forward and backward."""
    return _KeptGradEmbedding.apply(ids, weight, padding_idx, workspace)
