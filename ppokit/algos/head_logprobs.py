"""Log-probs of labels under softmax(hidden @ Wᵀ / t), the LM head's product and the vocabulary-wide work in one
autograd function, with a logged (gradient-free) entropy.

The general path (`training/lm_head.py`) runs the head module under activation checkpointing and autocast: per
chunk it casts W to the compute dtype twice (forward and recompute), upcasts the (C, V) logits twice, and builds
(C, V) float32 temporaries for the logsumexp and the gradient. With a 49k vocabulary each of those is 60-200 MB —
above glibc's 32 MB mmap threshold, so every one is a fresh mapping the kernel faults in and zeroes: ≈ 450,000 page
faults and a fifth of an update's wall time (docs/performance.md, "Eighth pass"). Here:

- W is cast once per call (every chunk of a micro-batch shares it) into a buffer the caller keeps, and backward uses
  that cast unless another call recast into the buffer meanwhile (then it casts again);
- the (C, V) logits go into a buffer the caller keeps (`out`); backward overwrites them, block by block, with their
  own gradient, so no (C, V) float32 tensor ever exists. Backward finds the forward's logits still there when no
  other chunk wrote into the buffer since (a micro-batch of at most `chunk_size` response tokens, the usual case:
  its forward, then its backward) and recomputes them only when one did: one (C, H) x (H, V) product saved;
- the vocabulary-wide float32 work runs `block_rows(V)` rows at a time (≤ 4 MB: its eight passes over a block run
  from the CPU's caches, and glibc hands the same memory back; 16 MB blocks took 1.3-1.9x as long, docs/performance.md);
- the weight's gradient is multiplied out into a kept compute-dtype buffer before its cast to the weight's dtype.

Per row the operations are those of the general path (the same `logprobs` helpers, the same products), so the
values and gradients are the same numbers (tests/algos/test_head_logprobs.py compares them bit for bit).
"""

from __future__ import annotations

import torch

from ppokit.algos.logprobs import (
    entropy_given_lse,
    picked_minus_logsumexp,
    picked_minus_logsumexp_grad,
    scaled_upcast,
)

BLOCK_BYTES = 4 * 2**20


def block_rows(vocab: int) -> int:
    """Rows of float32 (rows, vocab) temporaries that fit in BLOCK_BYTES (at least 1)."""
    return max(1, BLOCK_BYTES // (4 * vocab))


class _HeadLogprobs(torch.autograd.Function):
    """(log-probs (N,), entropies (N,) or None) of labels (N,) under softmax(hidden @ weightᵀ / t).

    hidden: (N, H) in the compute dtype; weight: (V, H) the parameter; cast: `KeptCast` of the weight in the compute
    dtype; out: `KeptLogits`, a (N, V) compute-dtype buffer for the logits (overwritten, in forward and in backward).
    Gradients flow to hidden and weight (in weight's dtype); the entropy has none.
    """

    @staticmethod
    def forward(ctx, hidden, weight, kept, labels, temperature, with_entropy, out):
        cast = kept.tensor
        logits = torch.mm(hidden, cast.t(), out=out.tensor)
        n, vocab = logits.shape
        logp = logits.new_empty(n, dtype=torch.float32)
        lse = logits.new_empty(n, dtype=torch.float32)
        entropy = logits.new_empty(n, dtype=torch.float32) if with_entropy else None
        step = block_rows(vocab)
        for s in range(0, n, step):
            x = scaled_upcast(logits[s : s + step], temperature)
            logp[s : s + step], lse[s : s + step] = picked_minus_logsumexp(x, labels[s : s + step])
            if with_entropy:
                entropy[s : s + step] = entropy_given_lse(x, lse[s : s + step])
        ctx.save_for_backward(hidden, weight, labels, lse)
        ctx.temperature, ctx.out, ctx.kept = temperature, out, kept
        ctx.mark_non_differentiable(*(() if entropy is None else (entropy,)))
        return logp, entropy

    @staticmethod
    def backward(ctx, grad_logp, _grad_entropy):
        hidden, weight, labels, lse = ctx.saved_tensors
        t, kept = ctx.temperature, ctx.kept
        cast = kept.tensor if kept.still_cast() else weight.detach().to(kept.tensor.dtype)
        logits = ctx.out.tensor
        if not ctx.out.still_there():  # another chunk's logits were written over them: the forward's again
            torch.mm(hidden, cast.t(), out=logits)
        step = block_rows(logits.shape[1])
        for s in range(0, logits.shape[0], step):
            block = slice(s, s + step)
            grad_x = picked_minus_logsumexp_grad(scaled_upcast(logits[block], t), lse[block], labels[block],
                                                 grad_logp[block])
            logits[block] = grad_x / t if t != 1.0 else grad_x  # then / t for x = logits / t
        ctx.out.written_over()
        grad_hidden = torch.mm(logits, cast) if ctx.needs_input_grad[0] else None
        grad_weight = None
        if ctx.needs_input_grad[1]:
            kept_buffer = kept.gradient_buffer()
            product = torch.mm(logits.t(), hidden) if kept_buffer is None else torch.mm(logits.t(), hidden,
                                                                                          out=kept_buffer)
            grad_weight = product.to(weight.dtype)
        ctx.out = ctx.kept = None
        return grad_hidden, grad_weight, None, None, None, None, None


def head_logprobs(hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, temperature: float = 1.0,
                  entropy: bool = False, compute_dtype: torch.dtype | None = None, chunk_size: int = 1024,
                  workspace: dict | None = None):
    """(log-probs (N,), entropies (N,) or None) of labels (N,) (>= 0) under softmax(hidden @ weightᵀ / temperature).

    hidden: (N, H), weight: (V, H) (an LM head's weight, no bias). Products in `compute_dtype` (None: weight's),
    the softmax in float32; `chunk_size` rows of logits at a time. `workspace` (a dict the caller keeps) holds the
    logits buffer between calls, so its memory is not mapped afresh each time. Differentiable in hidden and weight;
    the entropy is detached (for logging).
    """
    dtype = compute_dtype or weight.dtype
    with torch.autocast(hidden.device.type, enabled=False):
        cast = KeptCast.of(weight, dtype, workspace)
        h = hidden.to(dtype)
        pieces = []
        for s in range(0, h.shape[0], chunk_size):
            rows = h[s : s + chunk_size]
            out = KeptLogits(workspace, rows.shape[0], weight.shape[0], rows)
            pieces.append(_HeadLogprobs.apply(rows, weight, cast, labels[s : s + chunk_size], temperature, entropy,
                                              out))
    if not pieces:
        empty = hidden.new_zeros(labels.shape, dtype=torch.float32)
        return empty, (empty.clone() if entropy else None)
    logp = torch.cat([p[0] for p in pieces])
    return logp, (torch.cat([p[1] for p in pieces]) if entropy else None)


class KeptCast:
    """The head weight cast to the compute dtype, in a buffer kept in the caller's workspace, and the buffer its
    gradient is multiplied out into before the cast back: on a CPU, where a fresh (V, H) block is a fresh mapping.
    Without a workspace, where the weight already has the compute dtype (nothing to cast, and a kept gradient would
    be handed to autograd), or off the CPU (CUDA's caching allocator reuses its blocks; kept ones would only hold
    device memory), new tensors each call.
    `stamp` counts the casts into the kept buffer: a backward whose forward's cast was overwritten since (another
    call on the same head in between) casts again."""

    def __init__(self, tensor: torch.Tensor, stamp: int, workspace: dict | None, key: tuple):
        self.tensor, self.stamp, self.workspace, self.key = tensor, stamp, workspace, key

    @classmethod
    def of(cls, weight: torch.Tensor, dtype: torch.dtype, workspace: dict | None) -> KeptCast:
        if workspace is None or weight.dtype == dtype or weight.device.type != "cpu":
            return cls(weight.detach().to(dtype), 0, None, ())
        key = ("weight", dtype, weight.device)
        buffer = workspace.get(key)
        if buffer is None or buffer.shape != weight.shape:
            buffer = workspace[key] = torch.empty(weight.shape, dtype=dtype, device=weight.device)
        buffer.copy_(weight.detach())
        return cls(buffer, new_stamp(workspace, key), workspace, key)

    def still_cast(self) -> bool:
        """Whether the buffer still holds this call's cast."""
        return self.workspace is None or self.workspace.get(self.key + ("stamp",)) == self.stamp

    def gradient_buffer(self) -> torch.Tensor | None:
        """A kept (V, H) compute-dtype tensor for the weight's gradient before its cast (None: a new one)."""
        if self.workspace is None:
            return None
        key = ("weight gradient",) + self.key[1:]
        buffer = self.workspace.get(key)
        if buffer is None or buffer.shape != self.tensor.shape:
            buffer = self.workspace[key] = torch.empty_like(self.tensor)
        return buffer


def new_stamp(workspace: dict, key: tuple) -> int:
    """Counts the writes into the workspace's buffer `key`; a reader compares its write's count with the latest."""
    workspace[key + ("stamp",)] = stamp = workspace.get(key + ("stamp",), 0) + 1
    return stamp


class KeptLogits:
    """A (rows, vocab) logits tensor of `like`'s dtype and device: a view of the workspace's kept buffer (grown when
    too small), stamped so that backward knows whether a later chunk wrote over it (on every device: the head's
    workspace is kept on CUDA too). Without a workspace a new tensor, which backward always recomputes: the
    reference path the tests compare the kept one with."""

    def __init__(self, workspace: dict | None, rows: int, vocab: int, like: torch.Tensor):
        self.workspace, self.key, self.stamp = workspace, (like.dtype, like.device), 0
        if workspace is None:
            self.tensor = like.new_empty(rows, vocab)
            return
        flat = workspace.get(self.key)
        if flat is None or flat.numel() < rows * vocab:
            flat = workspace[self.key] = like.new_empty(rows * vocab)
        self.tensor = flat[: rows * vocab].view(rows, vocab)
        self.stamp = new_stamp(workspace, self.key)

    def still_there(self) -> bool:
        """Whether the buffer still holds this chunk's logits (no later chunk wrote into it)."""
        return self.workspace is not None and self.workspace.get(self.key + ("stamp",)) == self.stamp

    def written_over(self) -> None:
        """Backward wrote gradients over the logits: nothing may take them for logits any more."""
        if self.workspace is not None:
            new_stamp(self.workspace, self.key)
