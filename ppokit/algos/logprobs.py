"""Token log-probabilities and entropies from logits, chunked along the sequence.

Logits of a language model are (B, T, V) with V ~ 50k-150k, often bf16. A float32 copy of all
of them (and the softmax autograd keeps for backward) is the largest tensor of an update step.
These functions walk T in chunks of ``chunk_size`` positions, upcast one chunk at a time, and
wrap each chunk in activation checkpointing when a gradient is needed and the chunk makes a copy
(an upcast or a temperature), so at most one chunk's float32 (B, chunk, V) temporaries are alive at
once, in forward and in backward.
"""

from __future__ import annotations

import torch
from torch.utils.checkpoint import checkpoint

__all__ = ["token_logprobs", "entropy_from_logits", "token_logprobs_and_entropy"]


def _upcast(x: torch.Tensor) -> torch.Tensor:
    """bf16/fp16 -> float32; float32/float64 unchanged. x: any shape -> same shape."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


def scaled_upcast(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """logits / temperature in float32 (float64 stays); logits itself when already float32 and t = 1 (read only)."""
    x = _upcast(logits)
    return x / temperature if temperature != 1.0 else x


def picked_minus_logsumexp(x: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(x[label] - logsumexp(x), logsumexp(x)) over the last dim. x: (..., V) float, labels: (...) long."""
    lse = torch.logsumexp(x, dim=-1)
    return x.gather(-1, labels.unsqueeze(-1)).squeeze(-1) - lse, lse


def picked_minus_logsumexp_grad(x: torch.Tensor, lse: torch.Tensor, labels: torch.Tensor,
                                grad: torch.Tensor) -> torch.Tensor:
    """Gradient (..., V) of `picked_minus_logsumexp`'s first output for upstream `grad` (...): exp(x - lse) · -g with
    g added at the labels, in one pass (a new tensor; x is only read)."""
    out = (x - lse.unsqueeze(-1)).exp_().mul_(-grad.unsqueeze(-1))  # logsumexp's gradient, as autograd's
    return out.scatter_add_(-1, labels.unsqueeze(-1), grad.unsqueeze(-1))


def entropy_given_lse(x: torch.Tensor, lse: torch.Tensor) -> torch.Tensor:
    """Entropy (...) of softmax(x) from x (..., V) and its logsumexp: one (..., V) temporary, exp and product in
    place (the same values as out of place)."""
    return lse - (x - lse.unsqueeze(-1)).exp_().mul_(x).sum(-1)


class _PickedMinusLogsumexp(torch.autograd.Function):
    """`picked_minus_logsumexp` (x: (B, C, V) float, labels: (B, C) long -> two (B, C)), the logsumexp without
    gradient. The same numbers as autograd's `x.gather(...) - torch.logsumexp(x)` forward and backward, bit for bit,
    but the backward makes one (B, C, V) pass (`picked_minus_logsumexp_grad`), where autograd zero-fills a (B, C, V)
    tensor for the gather's gradient, builds the logsumexp's, and adds the two (≈ 3 % of an update with a 49k
    vocabulary; docs/performance.md).
    """

    @staticmethod
    def forward(ctx, x, labels):
        picked, lse = picked_minus_logsumexp(x, labels)
        ctx.save_for_backward(x, lse, labels)
        ctx.mark_non_differentiable(lse)
        return picked, lse

    @staticmethod
    def backward(ctx, grad, _grad_lse):
        x, lse, labels = ctx.saved_tensors
        return picked_minus_logsumexp_grad(x, lse, labels, grad), None


def _chunk_logprobs(logits: torch.Tensor, labels: torch.Tensor, temperature: float) -> torch.Tensor:
    """log softmax(logits / temperature)[label] for one chunk.

    logits: (B, C, V), labels: (B, C) long, >= 0 -> (B, C) float32 (or float64).
    Computed as gather - logsumexp: no (B, C, V) log-softmax output is kept.
    """
    return _PickedMinusLogsumexp.apply(scaled_upcast(logits, temperature), labels)[0]


def _chunk_logprobs_entropy(logits: torch.Tensor, labels: torch.Tensor, temperature: float):
    """(log-probs (B, C) with grad, entropies (B, C) without) of one chunk from one float32 copy.

    The entropy comes last and under no_grad: non-reentrant checkpointing stops its recomputation
    once the log-prob's saved tensors are rebuilt, so backward never recomputes the entropy.
    """
    x = scaled_upcast(logits, temperature)
    logp, lse = _PickedMinusLogsumexp.apply(x, labels)
    with torch.no_grad():
        entropy = entropy_given_lse(x, lse)
    return logp, entropy


def _chunk_entropy(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """Entropy of softmax(logits / temperature) for one chunk: logsumexp(x) - sum(p x).

    logits: (B, C, V) -> (B, C) float32 (or float64).
    """
    x = _upcast(logits)
    if temperature != 1.0:
        x = x / temperature
    p = torch.softmax(x, dim=-1)
    return torch.logsumexp(x, dim=-1) - (p * x).sum(-1)


def _run(fn, needs_grad: bool, *args):
    """Call ``fn(*args)``, under non-reentrant checkpointing when a gradient is needed."""
    if needs_grad:
        return checkpoint(fn, *args, use_reentrant=False)
    return fn(*args)


def _copies_logits(logits: torch.Tensor, temperature: float) -> bool:
    """Whether the log-prob pass makes a (B, C, V) copy that backward would keep: an upcast or a division by
    the temperature. Without one, autograd keeps only the logits (alive anyway) and the logsumexp, so
    checkpointing would only recompute the logsumexp in backward for nothing."""
    return logits.dtype not in (torch.float32, torch.float64) or temperature != 1.0


def _check_chunk(logits: torch.Tensor, chunk_size: int) -> None:
    """Validate shapes: logits (B, T, V), chunk_size >= 1."""
    if logits.dim() != 3:
        raise ValueError(f"logits must be (B, T, V), got {tuple(logits.shape)}")
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")


def token_logprobs(
    logits: torch.Tensor, labels: torch.Tensor, chunk_size: int = 1024, temperature: float = 1.0
) -> torch.Tensor:
    """Log-probabilities of ``labels`` under ``softmax(logits / temperature)``.

    logits: (B, T, V) any float dtype, labels: (B, T) int -> (B, T) float32 (float64 for
    float64 logits). logits[:, t] must already be the prediction for labels[:, t] (shift
    before calling). Positions with a negative label (e.g. -100 padding) give 0.
    Differentiable: the gradient flows to ``logits``.
    """
    _check_chunk(logits, chunk_size)
    if labels.shape != logits.shape[:2]:
        raise ValueError(f"labels shape {tuple(labels.shape)} != logits (B, T) {tuple(logits.shape[:2])}")
    recompute = torch.is_grad_enabled() and logits.requires_grad and _copies_logits(logits, temperature)
    ignore = labels < 0
    safe = labels.clamp_min(0).long()
    pieces = [
        _run(_chunk_logprobs, recompute, logits[:, s : s + chunk_size], safe[:, s : s + chunk_size], temperature)
        for s in range(0, logits.shape[1], chunk_size)
    ]
    out = torch.cat(pieces, dim=1) if pieces else _upcast(logits).new_zeros(labels.shape)
    return out.masked_fill(ignore, 0.0)


def entropy_from_logits(logits: torch.Tensor, chunk_size: int = 1024, temperature: float = 1.0) -> torch.Tensor:
    """Entropy of each position's next-token distribution ``softmax(logits / temperature)``.

    logits: (B, T, V) any float dtype -> (B, T) float32 (float64 for float64 logits).
    Differentiable: the gradient flows to ``logits``.
    """
    _check_chunk(logits, chunk_size)
    needs_grad = torch.is_grad_enabled() and logits.requires_grad
    pieces = [
        _run(_chunk_entropy, needs_grad, logits[:, s : s + chunk_size], temperature)
        for s in range(0, logits.shape[1], chunk_size)
    ]
    if not pieces:
        return _upcast(logits).new_zeros(logits.shape[:2])
    return torch.cat(pieces, dim=1)


def token_logprobs_and_entropy(
    logits: torch.Tensor, labels: torch.Tensor, chunk_size: int = 1024, temperature: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """`token_logprobs` and a detached `entropy_from_logits` in one pass over the logits.

    logits: (B, T, V), labels: (B, T) int -> ((B, T) log-probs, differentiable; (B, T) entropies,
    no gradient), both float32. For entropy that is only logged: it reuses each chunk's float32
    copy and logsumexp instead of a second pass over the vocabulary.
    """
    _check_chunk(logits, chunk_size)
    if labels.shape != logits.shape[:2]:
        raise ValueError(f"labels shape {tuple(labels.shape)} != logits (B, T) {tuple(logits.shape[:2])}")
    if logits.shape[1] == 0:
        empty = _upcast(logits).new_zeros(labels.shape)
        return empty, empty.clone()
    recompute = torch.is_grad_enabled() and logits.requires_grad and _copies_logits(logits, temperature)
    safe = labels.clamp_min(0).long()
    pieces = [
        _run(_chunk_logprobs_entropy, recompute, logits[:, s : s + chunk_size], safe[:, s : s + chunk_size], temperature)
        for s in range(0, logits.shape[1], chunk_size)
    ]
    logp = torch.cat([p[0] for p in pieces], dim=1).masked_fill(labels < 0, 0.0)
    return logp, torch.cat([p[1] for p in pieces], dim=1)
